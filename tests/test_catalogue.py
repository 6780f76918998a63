"""The TPU catalogue: accelerator names -> chips and hosts, and the per-generation rules."""

import pytest

from tpujob.catalogue import GENERATIONS, accelerator
from tpujob.errors import EXIT_USAGE, SpecError


@pytest.mark.parametrize("name, chips, hosts", [
    ("v2-8", 4, 1),
    ("v3-32", 16, 4),
    ("v4-8", 4, 1),
    ("v4-16", 8, 2),
    ("v4-128", 64, 16),
    ("v5p-8", 4, 1),
    ("v5p-128", 64, 16),
    ("v5litepod-1", 1, 1),
    ("v5litepod-8", 8, 1),
    ("v5litepod-16", 16, 4),
    ("v6e-8", 8, 1),
    ("v6e-256", 256, 64),
    ("tpu7x-8", 4, 1),  # tpu7x-N counts TensorCores, two per chip, four chips per VM
    ("tpu7x-16", 8, 2),
    ("tpu7x-128", 64, 16),
])
def test_chips_and_hosts(name, chips, hosts):
    acc = accelerator(name)
    assert (acc.name, acc.chips, acc.hosts) == (name, chips, hosts)
    assert acc.multi_host == (hosts > 1)


def test_core_counting_generations_have_two_cores_per_chip():
    acc = accelerator("v4-16")
    assert acc.cores == 16
    assert acc.chips_per_host == 4


def test_v5e_alias_names_the_v5litepod_type():
    assert accelerator("v5e-16").name == "v5litepod-16"
    assert accelerator(" V4-8 ").name == "v4-8"


@pytest.mark.parametrize("name, fragment", [
    ("v4-12", "v4-12 does not exist"),
    ("v5litepod-3", "v5litepod-3 does not exist"),
    ("v6e-12", "does not exist"),
    ("v7-8", "unknown TPU generation"),
    ("tpu", "not an accelerator type"),
    ("v4", "not an accelerator type"),
])
def test_refused_names(name, fragment):
    with pytest.raises(SpecError) as info:
        accelerator(name)
    assert fragment in str(info.value)
    assert info.value.exit_code == EXIT_USAGE


def test_nearest_sizes_are_suggested():
    with pytest.raises(SpecError, match=r"nearest: v4-8 or v4-16"):
        accelerator("v4-12")


@pytest.mark.parametrize("gen", sorted(GENERATIONS))
def test_every_size_splits_evenly_into_hosts(gen):
    g = GENERATIONS[gen]
    for n in g.sizes:
        acc = accelerator(f"{gen}-{n}")
        assert acc.chips * acc.generation.cores_per_chip == (n if g.counts == "cores" else n * g.cores_per_chip)
        assert acc.chips == acc.hosts * acc.chips_per_host, acc.name
        if acc.multi_host:
            assert acc.chips_per_host == g.chips_per_host, acc.name
        else:
            assert acc.chips <= g.single_host_max_chips, acc.name


@pytest.mark.parametrize("gen, runtime, disks", [
    ("v2", "tpu-ubuntu2204-base", ("pd-balanced",)),
    ("v3", "tpu-ubuntu2204-base", ("pd-balanced",)),
    ("v4", "tpu-ubuntu2204-base", ("pd-balanced",)),
    ("v5litepod", "v2-alpha-tpuv5-lite", ("pd-balanced", "hyperdisk-ml")),
    ("v5p", "v2-alpha-tpuv5", ("pd-balanced", "hyperdisk-ml")),
    ("v6e", "v2-alpha-tpuv6e", ("hyperdisk-ml", "hyperdisk-balanced")),
])
def test_runtime_versions_and_disk_types(gen, runtime, disks):
    """Google's TPU disk table: Balanced PD up to v4, Hyperdisk ML too on v5e/v5p, no PD on
    v6e; the first is the default."""
    g = GENERATIONS[gen]
    assert g.runtime_version == runtime
    assert g.disk_types == disks
    assert g.default_disk_type == disks[0]


def test_every_generation_has_peaks_and_memory():
    for g in GENERATIONS.values():
        assert g.peak_bf16_flops_per_chip > 1e12, g.name
        assert g.hbm_gib_per_chip > 0, g.name


def test_hourly_cost_is_the_chip_price_times_chips():
    acc = accelerator("v4-16")
    assert acc.hourly_cost(spot=False) == pytest.approx(acc.generation.on_demand_usd_per_chip_hour * 8, abs=0.01)
    # Spot prices are not guessed: an unknown one stays unknown rather than becoming 0.
    spot = acc.generation.spot_usd_per_chip_hour
    assert acc.hourly_cost(spot=True) == (None if spot is None else pytest.approx(spot * 8, abs=0.01))


@pytest.mark.parametrize("name, spot", [("v2-8", 1.35), ("v3-8", 2.40), ("v4-8", 3.86), ("v4-128", 61.82)])
def test_published_spot_prices(name, spot):
    # v2-8/v3-8: Google's preemptible single-device prices; v4-8: $3.864/h (see catalogue.py).
    acc = accelerator(name)
    assert acc.hourly_cost(spot=True) == pytest.approx(spot, abs=0.01)
    assert acc.hourly_cost(spot=True) < acc.hourly_cost(spot=False)


@pytest.mark.parametrize("name", ["v5litepod-8", "v5p-8", "v6e-8"])
def test_an_unpublished_spot_price_stays_unknown(name):
    acc = accelerator(name)
    assert acc.hourly_cost(spot=True) is None
    assert acc.hourly_cost(spot=False) > 0


def test_every_generation_has_its_zones_and_v4_only_one():
    from tpujob.catalogue import ZONES, offers

    assert set(ZONES) == set(GENERATIONS)
    assert ZONES["v4"] == {"us-central2-b"}
    assert offers("us-central2-b", "v4-128") and not offers("us-central2-a", "v4-8")
    assert offers("us-west4-a", "v5e-8")  # an alias reads as its generation
    assert not offers("us-central2-b", "v4-7")  # no such accelerator type: offered nowhere


def test_tpu7x_is_not_served_by_the_tpu_api():
    from tpujob.catalogue import ZONES, tpu_api_offers

    g = GENERATIONS["tpu7x"]
    assert (g.cores_per_chip, g.chips_per_host, g.peak_bf16_flops_per_chip, g.hbm_gib_per_chip) == (2, 4, 2307e12, 192)
    assert not g.tpu_api and not tpu_api_offers("tpu7x-8")
    assert tpu_api_offers("v6e-8") and tpu_api_offers("v5p-8")
    assert ZONES["tpu7x"] == {"us-central1-c", "us-central1-ai1a"}
    assert accelerator("v7x-8").name == "tpu7x-8"


@pytest.mark.parametrize("provisioning, expected", [
    ("on-demand", 21.60), ("spot", None), ("flex-start", None), ("reservation", None),
])
def test_price_for_each_provisioning(provisioning, expected):
    # v6e-8: $2.70 per chip-hour on demand; no published spot, flex-start (DWS) or reservation rate.
    assert accelerator("v6e-8").price_for(provisioning) == expected


def test_spot_and_preemptible_take_the_spot_price():
    acc = accelerator("v4-8")
    assert acc.price_for("spot") == acc.price_for("preemptible") == pytest.approx(3.86, abs=0.01)

"""The TPU catalogue: what an accelerator name means. Data, not code.

Sources (checked 2026-11):
- Chips, cores, hosts, peak bf16 FLOP/s and HBM per chip: Google's system-architecture pages
  https://cloud.google.com/tpu/docs/v2, /v3, /v4, /v5e, /v5p, /v6e ("Peak compute per chip
  (bf16)": v2 45 TFLOPs (180 per 4-chip board), v3 123, v4 275, v5e 197, v5p 459, v6e 918;
  HBM per chip: v2 16 GiB, v3 32 GiB, v4 32 GiB, v5e 16 GB, v5p 95 GB, v6e 32 GB).
- Accelerator-type sizes: the "Configurations" tables of the same pages (v4-N and v5p-N count
  TensorCores, two per chip, four chips per host; v5litepod-N and v6e-N count chips, a single
  host up to 8 chips, 4 chips per host beyond).
- Runtime versions: https://cloud.google.com/tpu/docs/runtimes.
- Data-disk types (DISK_TYPES below): Google's "Attach durable block storage to a TPU VM"
  (https://cloud.google.com/tpu/docs/attach-durable-block-storage, table "TPU support for
  Hyperdisk and Persistent Disk") and "Storage options for Cloud TPU data"
  (https://cloud.google.com/tpu/docs/storage-options, "TPU generation and supported disk
  types"), checked 2026-11: v2, v3, v4 Balanced Persistent Disk; v5e, v5p Balanced Persistent
  Disk and Hyperdisk ML; v6e Hyperdisk Balanced and Hyperdisk ML ("Persistent Disk is not
  supported ... including Cloud TPU v6e"). pd-standard, pd-ssd, pd-extreme and
  hyperdisk-throughput are listed for no generation. The first type is the default.
- On-demand price per chip-hour (USD, us-central regions): https://cloud.google.com/tpu/pricing.
- Spot (and preemptible) price per chip-hour, USD, where a published figure was found (2026-11):
  v2, v3: Google's published preemptible single-device prices, v2-8 $1.35/h and v3-8 $2.40/h
  in us-central1 (https://cloud.google.com/tpu/pricing, "Single device pricing"), i.e.
  $0.3375 and $0.60 per chip-hour; no separate spot figure was found for them.
  v4: $0.966 per chip-hour in us-central2 (tpu-v4-8: $12.88/h on-demand, $3.864/h spot), Google's
  pricing page as transcribed into SkyPilot's GCP catalogue fetcher
  (skypilot-org/skypilot, sky/clouds/service_catalog/data_fetchers/fetch_gcp.py), since the
  billing API lists no v4 price.
  v5e, v5p, v6e, TPU7x: no published per-chip spot figure was found; they stay None and
  `validate` says "unknown" rather than passing the on-demand price off as the spot price. Spot
  prices move (Google may change them up to once a day) and differ by region: these are estimates.
- TPU7x (Ironwood): https://cloud.google.com/tpu/docs/tpu7x (checked 2026-11): two TensorCores
  per chip, 2307 bf16 TFLOPs and 192 GiB HBM per chip, 4 chips per VM (tpu7x-standard-4t).
  tpu7x-N counts TensorCores like v5p-N: tpu7x-8 is 4 chips (2x2x1, one VM), tpu7x-16 is 8
  chips (2x2x2, two VMs), tpu7x-128 is 64 chips (4x4x4, 16 VMs): Google's own xpk
  (AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py: device_type
  f"tpu7x-{chips * 2}", chips_per_vm 4) and the TPU_ACCELERATOR_TYPE `tpu7x-16` a two-VM slice
  reports (its `tpu-env` metadata, as quoted in third-party TPU7x guides). No TPU7x price was found on
  https://cloud.google.com/tpu/pricing (searched 2026-11): on-demand and spot stay None.
- Flex-start (Dynamic Workload Scheduler) is billed at DWS prices, "discounts (up to 53%)" on
  TPUs against on-demand (https://cloud.google.com/kubernetes-engine/docs/concepts/dws,
  "Flex-start pricing"); no per-chip figure is published, so a flex-start estimate is None.
  TPU reservations come with a committed use discount whose rate is the customer's contract
  (https://cloud.google.com/tpu/docs/consumption-options): None as well.
- Zones per generation: see ZONES below.

What an accelerator type becomes as Compute Engine VMs (machine type, topology, image) is
tpujob.compute_shapes, built on these tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from tpujob.errors import SpecError

# The two Google APIs a slice is made through: the Cloud TPU API (nodes, queued resources) and
# Compute Engine (instances; the only way to TPU7x: Generation.tpu_api). Declared here only, at
# the bottom, so that the spec (tpu.api, ResolvedSpec.api) and the cloud layer (SliceRequest.api,
# cloud/apis.TpuApis.for_api) share them without the spec importing the cloud.
Api = Literal["tpu-vm", "compute"]
TPU_VM: Final = "tpu-vm"
COMPUTE: Final = "compute"


@dataclass(frozen=True)
class Generation:
    name: str  # the accelerator-type prefix, e.g. "v5litepod"
    alias: str  # what people call it, e.g. "v5e"
    counts: str  # what the -N suffix counts: "cores" or "chips"
    cores_per_chip: int
    chips_per_host: int
    single_host_max_chips: int  # v5e/v6e fit up to 8 chips on one host
    sizes: tuple[int, ...]  # every N for which NAME-N exists
    runtime_version: str
    disk_types: tuple[str, ...]  # data disks it takes, the default first (DISK_TYPES)
    peak_bf16_flops_per_chip: float
    hbm_gib_per_chip: float
    on_demand_usd_per_chip_hour: float | None
    spot_usd_per_chip_hour: float | None = None  # None: no published figure (not zero, not on-demand)
    # Whether the Cloud TPU API (nodes, queued resources) serves it: not TPU7x or later ("The
    # Cloud TPU API is not supported on TPU7x and later TPU versions",
    # https://cloud.google.com/tpu/docs/attach-durable-block-storage).
    tpu_api: bool = True

    @property
    def default_disk_type(self) -> str:
        return self.disk_types[0]


# One table: what spec validation allows and what the emulator's TPU API attaches.
DISK_TYPES = {
    "v2": ("pd-balanced",),
    "v3": ("pd-balanced",),
    "v4": ("pd-balanced",),
    "v5litepod": ("pd-balanced", "hyperdisk-ml"),
    "v5p": ("pd-balanced", "hyperdisk-ml"),
    "v6e": ("hyperdisk-ml", "hyperdisk-balanced"),
    # Unknown: Google's disk table has no TPU7x row. Its boot disk is Hyperdisk Balanced, not
    # Balanced PD (https://cloud.google.com/compute/docs/tpus/tpu-machines): taken as v6e's.
    "tpu7x": ("hyperdisk-ml", "hyperdisk-balanced"),
}

# Disk types Google never attaches read-only, with Compute's own refusal: 400 badRequest on
# attachDisk, "hyperdisk-balanced disk type cannot be attached in read-only mode." (quoted in
# google/cloud-forensics-utils#530); openshift/openshift-docs#93588: "For GCP hyperdisk-balanced
# disks: ReadOnlyMany is not supported". One table: spec validation and the emulator's Compute.
NEVER_READ_ONLY = {"hyperdisk-balanced": "hyperdisk-balanced disk type cannot be attached in read-only mode."}

_V5P_SIZES = (8, 16, 32, 64) + tuple(range(128, 12288 + 1, 128))

# 3-D topologies (chips along x, y, z) of slices made of 4-chip VMs. Google publishes no list
# for Compute Engine (cloud.google.com/compute/docs/tpus/tpu-machines names a few, not a list);
# the strongest source is Google's own xpk (AI-Hypercomputer/xpk,
# src/xpk/core/system_characteristics.py, supported_topologies of ct5p-hightpu-4t and
# tpu7x-standard-4t), which agrees with the v5p ones Google's tpu-machines page names
# (2x2x1 = 1 VM, 2x2x2 = 2, 2x4x4 = 8, 4x4x4 = 16). tpu7x-standard-1t (1x1x1) is left out:
# "all TPU7x slices use" tpu7x-standard-4t (cloud.google.com/compute/docs/tpus/tpu-machines).
V5P_TOPOLOGIES = tuple("""
2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 4x8x20
4x4x44 8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 4x8x44 4x4x92
8x12x16 4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 4x12x44 4x8x68 4x20x28
12x12x16 4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188
12x16x16 4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236
12x16x20 4x4x244 4x8x124 12x12x28 16x16x16 4x20x52 8x12x44 8x8x68 4x12x92 8x20x28 12x16x24
4x8x148 12x20x20 8x8x76 4x28x44 8x12x52 16x16x20 12x12x36 4x8x164 12x16x28 4x20x68 4x8x172
4x12x116 8x16x44 12x20x24 4x28x52 8x8x92 4x12x124 4x8x188 4x20x76 16x16x24 12x24x24 16x20x28
""".split())
TPU7X_TOPOLOGIES = tuple("""
2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x4x20 4x4x28 4x4x44 4x4x52 4x4x68 4x4x76 4x4x92
4x4x116 4x4x124 4x4x148 4x4x164 4x4x172 4x4x188 4x4x212 4x4x236 4x4x244 4x8x8 4x8x12 4x8x20
4x8x28 4x8x44 4x8x52 4x8x68 4x8x76 4x8x92 4x8x116 4x8x124 4x8x148 4x8x164 4x8x172 4x8x188
4x12x12 4x12x20 4x12x28 4x12x44 4x12x52 4x12x68 4x12x76 4x12x92 4x12x116 4x12x124 4x20x20
4x20x28 4x20x44 4x20x52 4x20x68 4x20x76 4x28x28 4x28x44 4x28x52 8x8x8 8x8x12 8x8x16 8x8x20
8x8x28 8x8x44 8x8x52 8x8x68 8x8x76 8x8x92 8x12x12 8x12x16 8x12x20 8x12x28 8x12x44 8x12x52
8x16x16 8x16x20 8x16x28 8x16x44 8x20x20 8x20x28 12x12x12 12x12x16 12x12x20 12x12x24 12x12x28
12x12x36 12x16x16 12x16x20 12x16x24 12x16x28 12x20x20 12x20x24 12x24x24 16x16x16 16x16x20
16x16x24 16x16x32 16x20x28 16x24x24
""".split())


def count_chips(topology: str) -> int:
    n = 1
    for d in topology.split("x"):
        n *= int(d)
    return n


# tpu7x-N counts TensorCores (two per chip): one size per chip count of a topology.
_TPU7X_SIZES = tuple(sorted({count_chips(t) * 2 for t in TPU7X_TOPOLOGIES}))

GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("v2", "v2", "cores", 2, 4, 4, (8, 32, 128, 256, 512),
                   "tpu-ubuntu2204-base", DISK_TYPES["v2"], 45e12, 16, 1.125, 0.3375),
        Generation("v3", "v3", "cores", 2, 4, 4, (8, 32, 64, 128, 256, 512, 1024, 2048),
                   "tpu-ubuntu2204-base", DISK_TYPES["v3"], 123e12, 32, 2.00, 0.60),
        Generation("v4", "v4", "cores", 2, 4, 4,
                   (8, 16, 32, 64, 128, 256, 384, 512, 1024, 1536, 2048, 3072, 4096),
                   "tpu-ubuntu2204-base", DISK_TYPES["v4"], 275e12, 32, 3.22, 0.966),
        Generation("v5litepod", "v5e", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256),
                   "v2-alpha-tpuv5-lite", DISK_TYPES["v5litepod"], 197e12, 16, 1.20),
        Generation("v5p", "v5p", "cores", 2, 4, 4, _V5P_SIZES,
                   "v2-alpha-tpuv5", DISK_TYPES["v5p"], 459e12, 95, 4.20),
        Generation("v6e", "v6e", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256),
                   "v2-alpha-tpuv6e", DISK_TYPES["v6e"], 918e12, 32, 2.70),
        # No TPU API runtime version: a Compute Engine TPU7x VM boots an image, and that image's
        # family (tpujob.compute_shapes.COMPUTE_FORMS) stands in for it (the setup cache's key, what `validate` shows).
        Generation("tpu7x", "tpu7x", "cores", 2, 4, 4, _TPU7X_SIZES,
                   "ubuntu-accel-2404-amd64-tpu-tpu7x", DISK_TYPES["tpu7x"], 2307e12, 192, None,
                   tpu_api=False),
    )
}

_ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod", "v7x": "tpu7x"}
_NAME = re.compile(r"^(?P<gen>[a-z0-9]+?)-(?P<n>\d+)\Z")


@dataclass(frozen=True)
class Accelerator:
    name: str  # canonical accelerator type, e.g. "v4-16"
    generation: Generation
    chips: int
    hosts: int

    @property
    def cores(self) -> int:
        return self.chips * self.generation.cores_per_chip

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts

    def hourly_cost(self, spot: bool) -> float | None:
        price = (self.generation.spot_usd_per_chip_hour if spot
                 else self.generation.on_demand_usd_per_chip_hour)
        return None if price is None else round(price * self.chips, 2)

    def price_for(self, provisioning: str) -> float | None:
        """USD per hour at a spec's provisioning: the list price on demand, the spot price for
        spot and legacy preemptible; None for flex-start and reservations, whose rates Google
        does not publish per chip (see the module's sources), and wherever a figure is missing."""
        if provisioning in ("flex-start", "reservation"):
            return None
        return self.hourly_cost(spot=provisioning != "on-demand")


def accelerator(name: str) -> Accelerator:
    """Parse an accelerator type (`v4-16`, `v5litepod-8`, `v5e-8`) or raise SpecError."""
    match = _NAME.match(str(name).strip().lower())
    if not match:
        raise SpecError(f"{name!r} is not an accelerator type like v4-8 or v5litepod-16")
    gen_name = _ALIASES.get(match["gen"], match["gen"])
    gen = GENERATIONS.get(gen_name)
    if gen is None:
        known = ", ".join(sorted(GENERATIONS))
        raise SpecError(f"unknown TPU generation {match['gen']!r} (known: {known})")
    n = int(match["n"])
    if n not in gen.sizes:
        near = sorted(gen.sizes, key=lambda s: abs(s - n))[:2]
        hint = " or ".join(f"{gen.name}-{s}" for s in sorted(near))
        raise SpecError(f"{gen.name}-{n} does not exist (nearest: {hint})")
    chips = n // gen.cores_per_chip if gen.counts == "cores" else n
    if chips <= gen.single_host_max_chips:
        hosts = 1
    else:
        hosts = chips // gen.chips_per_host
    return Accelerator(f"{gen.name}-{n}", gen, chips, hosts)


def generation(name: str) -> Generation:
    """A bare generation (`v6e`, `v5e`, `v5litepod`) or an accelerator type's generation
    (`v6e-8`); raises SpecError for either kind of unknown name."""
    bare = str(name).strip().lower()
    if _NAME.match(bare):
        return accelerator(bare).generation
    gen = GENERATIONS.get(_ALIASES.get(bare, bare))
    if gen is None:
        known = ", ".join(sorted({g.alias for g in GENERATIONS.values()}))
        raise SpecError(f"{name!r} is neither a TPU generation ({known}) nor an accelerator "
                        f"type like v6e-8")
    return gen


# Which zones offer each generation: Google's "TPU regions and zones" page
# (https://cloud.google.com/tpu/docs/regions-zones, checked 2026-11 in its current English
# version and its earlier and translated versions, e.g. /tpu/docs/types-zones?hl=de, which also
# list the single-tenant zones), the union of those versions, plus zones where the live API was
# seen accepting a create in a public zone-probe log quoting gcloud (v6e: asia-east1-c,
# asia-northeast1-b, asia-south1-b/c, asia-southeast1-b, southamerica-east1-c,
# southamerica-west1-a; the same log quotes the refusals the emulator answers elsewhere).
# SkyPilot's GCP catalogue (built from acceleratorTypes.list) agrees on the US and European
# rows. v2/v3 sizes differ per zone (v2-32 and up only in us-central1-a): the table is per
# generation. It may be stale: the live list is acceleratorTypes.list per zone, so `validate`
# only warns from it, while the emulator refuses what it does not list.
ZONES: dict[str, frozenset[str]] = {
    "v2": frozenset({"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f",
                     "europe-west4-a", "asia-east1-c"}),
    "v3": frozenset({"us-central1-a", "us-central1-b", "us-central1-f", "europe-west4-a"}),
    "v4": frozenset({"us-central2-b"}),
    "v5litepod": frozenset({"us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a",
                            "us-east5-a", "us-east5-b", "us-east5-c", "europe-west4-b"}),
    "v5p": frozenset({"us-central1-a", "us-east5-a", "us-east5-b", "us-east5-c", "us-south1-a",
                      "europe-west4-b"}),
    "v6e": frozenset({"us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "us-east5-c",
                      "us-east4-a", "us-east4-b", "us-west1-c", "europe-west4-a", "asia-east1-c",
                      "asia-northeast1-b", "asia-south1-b", "asia-south1-c", "asia-southeast1-b",
                      "southamerica-east1-c", "southamerica-west1-a"}),
    # Compute Engine only (no TPU API): https://cloud.google.com/tpu/docs/regions-zones, TPU7x.
    "tpu7x": frozenset({"us-central1-c", "us-central1-ai1a"}),
}
TPU_ZONES: frozenset[str] = frozenset().union(*ZONES.values())


def tpu_api_offers(accelerator_type: str) -> bool:
    """Whether the Cloud TPU API serves the accelerator's generation at all (not TPU7x)."""
    try:
        return accelerator(accelerator_type).generation.tpu_api
    except SpecError:
        return False


def offers(zone: str, accelerator_type: str) -> bool:
    """Whether Google's published table lists the accelerator's generation in the zone (an
    accelerator type that does not exist is offered nowhere)."""
    try:
        gen = accelerator(accelerator_type).generation
    except SpecError:
        return False
    return zone in ZONES[gen.name]


def zones_offering(accelerator_type: str) -> list[str]:
    return sorted(ZONES[accelerator(accelerator_type).generation.name])


def placement_warning(accelerator_type: str, zone: str) -> str | None:
    """Why Google would refuse this accelerator in this zone, by the published table; None when
    the table lists it. A warning, not an error: the table may lag Google's live list."""
    if offers(zone, accelerator_type):
        return None
    where = ", ".join(zones_offering(accelerator_type))
    if zone not in TPU_ZONES:
        return (f"zone {zone} offers no TPUs in Google's published table; {accelerator_type} "
                f"is offered in {where}")
    return f"zone {zone} does not offer {accelerator_type} in Google's published table (it is offered in {where})"


# Disk and snapshot storage, USD per GiB-month, us-central1 (what `tpujob gc` prices leftovers
# at). Google's "Disk and image pricing" page (https://cloud.google.com/compute/disks-image-pricing)
# gives its own examples: "a 200 GB standard Persistent Disk volume would cost $8.00 for the whole
# month ... a 200 GB SSD Persistent Disk volume would cost $34.00" (pd-standard $0.04, pd-ssd
# $0.17); pd-balanced $0.10 as quoted from the same page's table (c3x.dev, "GCP persistent disk
# types cost", 2026). Standard snapshot storage: $0.05 per GB-month regional, us-central1, since
# 2023-04-01 (Google's "Compute Engine pricing announcement", /compute/pricing-announce).
# Hyperdisk bills capacity plus provisioned IOPS and throughput: no single per-GB figure, so
# None ("unknown") rather than a wrong one. A month is 730 hours in Google's billing.
DISK_USD_PER_GB_MONTH: dict[str, float] = {"pd-standard": 0.04, "pd-balanced": 0.10, "pd-ssd": 0.17}
SNAPSHOT_USD_PER_GB_MONTH = 0.05
HOURS_PER_MONTH = 730


def disk_hourly_cost(disk_type: str, size_gb: float) -> float | None:
    price = DISK_USD_PER_GB_MONTH.get(disk_type)
    return None if price is None else round(price * size_gb / HOURS_PER_MONTH, 4)


def snapshot_hourly_cost(storage_bytes: int) -> float:
    return round(SNAPSHOT_USD_PER_GB_MONTH * storage_bytes / 2**30 / HOURS_PER_MONTH, 4)

"""Multislice without a cloud: the spec (`tpu.slices`), the nodes an attempt is made of, how
their phases and hosts read as one slice, and the variables each host gets."""

from __future__ import annotations

import pytest
from spec_texts import dedent_spec as _spec

from tpujob import spec as spec_mod
from tpujob.cloud.base import Host, Slice, SlicePhase
from tpujob.cloud.multislice import combine, pick
from tpujob.errors import SpecError
from tpujob.hosts.fanout import Host as SshHost
from tpujob.hosts.program import HostAttempt
from tpujob.names import node_names

pytestmark = pytest.mark.usefixtures("no_emulator_left")


def _resolve(text: str):
    spec, lines = spec_mod.parse(text)
    return spec_mod.resolve(spec, lines, default_project="p")


def _text(accelerator="v4-16", slices=2, queued="false", zone="us-central2-b") -> str:
    return _spec(f"""
        name: ms
        tpu: {{accelerator: {accelerator}, zone: {zone}, queued: {queued}, slices: {slices}}}
        run: {{command: python train.py}}
    """)


def test_slices_resolve_to_per_slice_hosts_and_a_cost_for_all():
    one, two = _resolve(_text(slices=1)), _resolve(_text(slices=2))
    assert (two.slices, two.hosts, two.chips) == (2, 2, 8)  # per slice, as for one slice
    assert two.cost_per_hour_usd == pytest.approx(2 * one.cost_per_hour_usd)
    assert two.on_demand_cost_per_hour_usd == pytest.approx(2 * one.on_demand_cost_per_hour_usd)


@pytest.mark.parametrize("text, field, words", [
    (_text(accelerator="v3-8", zone="europe-west4-a"), "tpu.slices", "TPU v4 or later, not v3"),
    (_text(slices=0), "tpu.slices", "must be at least 1"),
    (_text(slices="{min: 3, max: 2}"), "tpu.slices", "min (3) must not exceed max (2)"),
    (_text(slices="{min: 1, max: 1}"), "tpu.slices", "max: Input should be greater than or equal to 2"),
    (_text(slices="{min: 1, max: 2}", queued="true"), "tpu.queued", "an elastic job's slices are made apart"),
])
def test_slices_a_multislice_cannot_take_are_refused_with_the_field(text, field, words):
    with pytest.raises(SpecError) as info:
        _resolve(text)
    assert info.value.field == field and words in str(info.value)


def test_an_elastic_range_resolves_to_its_max_and_its_min():
    elastic = _resolve(_text(slices="{min: 1, max: 3}"))
    assert (elastic.slices, elastic.min_slices, elastic.spec.tpu.elastic) == (3, 1, True)
    assert elastic.cost_per_hour_usd == pytest.approx(3 * _resolve(_text(slices=1)).cost_per_hour_usd)
    fixed = _resolve(_text(slices=2))
    assert (fixed.slices, fixed.min_slices, fixed.spec.tpu.elastic) == (2, 2, False)


def test_validate_prints_hosts_per_slice_and_in_all(cli, tmp_path):
    path = tmp_path / "ms.yaml"
    path.write_text(_text())
    result = cli("validate", path)
    assert result.code == 0, result.err
    lines = dict(line.split(":", 1) for line in result.out.splitlines() if ":" in line)
    assert lines["slices"].strip() == "2 over DCN"
    assert lines["hosts"].strip() == "2 per slice, 4 in all"
    assert lines["chips"].strip() == "8 per slice, 16 in all"


def _node(name, phase, hosts=(), **kw) -> Slice:
    return Slice(name=name, zone="z", phase=phase, node_state=kw.pop("node_state", phase.value),
                 hosts=tuple(Host(i, ip) for i, ip in enumerate(hosts)), **kw)


def test_an_attempts_nodes_are_named_as_google_names_multislice_nodes():
    assert node_names("tpujob-000001-2", 1) == ["tpujob-000001-2"]
    assert node_names("tpujob-000001-2", 3) == ["tpujob-000001-2-0", "tpujob-000001-2-1", "tpujob-000001-2-2"]


def test_the_hosts_of_every_slice_are_numbered_slice_by_slice():
    whole = combine("s", "z", [_node("s-0", SlicePhase.READY, ["10.0.0.1", "10.0.0.2"]),
                               _node("s-1", SlicePhase.READY, ["10.0.1.1", "10.0.1.2"])])
    assert whole.phase == SlicePhase.READY
    assert [(h.index, h.ip) for h in whole.hosts] == [
        (0, "10.0.0.1"), (1, "10.0.0.2"), (2, "10.0.1.1"), (3, "10.0.1.2")]
    assert whole.node_state == "slice 0 READY, slice 1 READY"


@pytest.mark.parametrize("phases, expected", [
    ((SlicePhase.READY, SlicePhase.PREEMPTED), SlicePhase.PREEMPTED),  # one slice lost: all of it
    ((SlicePhase.FAILED, SlicePhase.READY), SlicePhase.FAILED),
    ((SlicePhase.READY, SlicePhase.PROVISIONING), SlicePhase.PROVISIONING),
    ((SlicePhase.READY, SlicePhase.GONE), SlicePhase.GONE),  # a node missing: its create tells why
    ((SlicePhase.GONE, SlicePhase.GONE), SlicePhase.GONE),
    ((SlicePhase.PREEMPTED, SlicePhase.DELETING), SlicePhase.PREEMPTED),
])
def test_the_worst_phase_of_the_nodes_is_the_slices(phases, expected):
    parts = [_node(f"s-{k}", p, ["10.0.0.1"]) for k, p in enumerate(phases)]
    assert combine("s", "z", parts).phase == expected


def test_a_listing_without_any_of_the_nodes_has_no_slice_and_a_missing_node_reads_gone():
    listed = {"s-0": _node("s-0", SlicePhase.READY, ["10.0.0.1"])}
    assert pick(listed.get, "t", "z", 2) is None
    assert pick(listed.get, "s", "z", 2).phase == SlicePhase.GONE
    assert pick(listed.get, "s-0", "z", 1) is listed["s-0"]


def _queue(state: str, **kw) -> Slice:
    from tpujob.cloud.base import slice_phase

    return Slice(name="s", zone="z", phase=slice_phase(None, state), queued_resource_state=state, **kw)


@pytest.mark.parametrize("queue, nodes, expected", [
    ("WAITING_FOR_RESOURCES", {}, SlicePhase.QUEUED),
    ("PROVISIONING", {}, SlicePhase.PROVISIONING),
    # a node not made yet while its queued resource provisions is coming, not lost
    ("PROVISIONING", {"s-0": SlicePhase.READY}, SlicePhase.PROVISIONING),
    ("ACTIVE", {"s-0": SlicePhase.READY, "s-1": SlicePhase.READY}, SlicePhase.READY),
    ("ACTIVE", {"s-0": SlicePhase.READY}, SlicePhase.GONE),  # active, a node gone under it
    ("SUSPENDING", {"s-0": SlicePhase.READY, "s-1": SlicePhase.DELETING}, SlicePhase.PREEMPTED),
    ("SUSPENDED", {}, SlicePhase.PREEMPTED),
    ("FAILED", {}, SlicePhase.FAILED),
    ("DELETING", {"s-0": SlicePhase.DELETING}, SlicePhase.DELETING),
])
def test_a_multislice_queued_resource_and_its_nodes_read_as_one_slice(queue, nodes, expected):
    listed = {"s": _queue(queue), **{n: _node(n, p, ["10.0.0.1"]) for n, p in nodes.items()}}
    whole = pick(listed.get, "s", "z", 2)
    assert (whole.phase, whole.queued_resource_state) == (expected, queue)


def test_the_slices_lost_are_the_nodes_gone_or_every_one_of_a_suspended_request():
    listed = {"s-0": _node("s-0", SlicePhase.READY, ["10.0.0.1"]), "s-1": _node("s-1", SlicePhase.PREEMPTED)}
    assert pick(listed.get, "s", "z", 2).lost_slices == (1,)
    assert pick({"s": _queue("SUSPENDED")}.get, "s", "z", 2).lost_slices == (0, 1)
    assert pick({"s": _queue("WAITING_FOR_RESOURCES")}.get, "s", "z", 2).lost_slices == ()


def test_a_failed_multislice_queued_resource_carries_its_failure():
    from tpujob.errors import StockoutError

    listed = {"s": _queue("FAILED", failure=StockoutError("no capacity"), detail="no capacity")}
    assert isinstance(pick(listed.get, "s", "z", 2).failure, StockoutError)


def test_every_host_gets_the_megascale_variables_of_its_slice():
    attempt = HostAttempt(job_id="000001", attempt=1, coordinator="10.0.0.1:8476", run_dir="/r",
                          workdir=".", slices=2)
    envs = [attempt.environment(SshHost(i, f"10.0.{i // 2}.{i % 2 + 1}"), 4) for i in range(4)]
    assert [e["MEGASCALE_SLICE_ID"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["MEGASCALE_COORDINATOR_ADDRESS"] for e in envs} == {"10.0.0.1:8081"}  # slice 0's host 0
    assert {(e["MEGASCALE_NUM_SLICES"], e["MEGASCALE_PORT"]) for e in envs} == {("2", "8081")}
    assert [e["TPUJOB_HOST_INDEX"] for e in envs] == ["0", "1", "2", "3"]  # JAX's process ids
    single = HostAttempt(job_id="000001", attempt=1, coordinator="10.0.0.1:8476", run_dir="/r", workdir=".")
    assert not any(k.startswith("MEGASCALE_") for k in single.environment(SshHost(0, "10.0.0.1"), 1))


def test_the_runtime_reads_its_slices_and_refuses_slices_that_do_not_divide_the_hosts():
    from tpujob.runtime.config import ConfigError
    from tpujob.runtime.distributed import read_env

    env = {"TPUJOB_RUN_DIR": "/r", "TPUJOB_NUM_HOSTS": "4", "TPUJOB_HOST_INDEX": "2",
           "TPUJOB_COORDINATOR": "10.0.0.1:8476"}
    assert read_env(env).num_slices == 1
    assert read_env({**env, "MEGASCALE_NUM_SLICES": "2"}).num_slices == 2
    with pytest.raises(ConfigError, match="3 slices do not divide 4 hosts"):
        read_env({**env, "MEGASCALE_NUM_SLICES": "3"})


def test_a_read_write_disk_is_refused_on_several_slices_even_of_one_host():
    text = _spec("""
        name: ms
        tpu: {accelerator: v4-8, zone: us-central2-b, queued: false, slices: 2}
        disks: [{name: scratch, mode: read-write, mount: /mnt/scratch}]
        run: {command: python train.py}
    """)
    with pytest.raises(SpecError, match="cannot be attached to 2 slices") as info:
        _resolve(text)
    assert info.value.field == "disks[0].mode"


def test_a_fallback_multislice_cannot_take_is_refused_at_its_own_field():
    text = _spec("""
        name: ms
        tpu:
          accelerator: v4-16
          zone: us-central2-b
          queued: false
          slices: 2
          fallback: [{accelerator: v3-8, zone: europe-west4-a}]
        run: {command: python train.py}
    """)
    with pytest.raises(SpecError, match="TPU v4 or later, not v3") as info:
        _resolve(text)
    assert info.value.field == "tpu.fallback[0].accelerator"

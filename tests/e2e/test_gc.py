"""`tpujob gc` against the emulator: leftovers of a crashed create are found, a running job's
resources never are, `--yes` deletes exactly what was listed, and another store's are never
touched; two stores' job 1 on one emulator get a slice each. Every test runs in a project of its
own."""

from __future__ import annotations

import json
import os
import time

import pytest
from reconcile_helpers import ZONE, api_list, finish, record, requeue_processes, running, sweep_until

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def nothing_left(project, local_cloud):
    """Slices these tests make outside any job (or whose job they forget) are deleted after each:
    left in the shared emulator, their running hosts broke the tests that came after."""
    yield
    from tpujob.clients import make_cloud
    from tpujob.service.context import Context

    cloud = make_cloud(Context.load().settings)
    names = {item["name"].rsplit("/", 1)[-1] for kind in ("queuedResources", "nodes")
             for item in api_list(local_cloud, project, ZONE, kind)}
    for name in sorted(names):
        cloud.delete_slice(project, ZONE, name)


def _request(project: str, name: str, labels: dict, queued: bool = False):
    from tpujob.cloud.base import SliceRequest

    return SliceRequest(project=project, zone=ZONE, name=name, accelerator_type="v4-8",
                        runtime_version="tpu-ubuntu2204-base", queued=queued, labels=labels)


def _store_id(context) -> str:
    from tpujob.store.identity import store_id

    return store_id(context.engine)


def _other_store(monkeypatch, tmp_path):
    """A second TPUJOB_HOME on the same project: its Context, then back to the test's home."""
    import os

    from tpujob.service.context import Context

    home = os.environ["TPUJOB_HOME"]
    monkeypatch.setenv("TPUJOB_HOME", str(tmp_path / "other-home"))
    other = Context.load()
    _store_id(other)  # opens (creates) its store while its home is set
    monkeypatch.setenv("TPUJOB_HOME", home)
    return other


def _names(rows) -> set[tuple[str, str]]:
    return {(r["kind"], r["name"]) for r in rows}


def _cloud_names(client, project) -> set[tuple[str, str]]:
    from tpujob.cloud.disks import GcpCompute

    found = {("node", n["name"].rsplit("/", 1)[-1]) for n in api_list(client, project, ZONE, "nodes")}
    found |= {("queued-resource", q["name"].rsplit("/", 1)[-1])
              for q in api_list(client, project, ZONE, "queuedResources")}
    compute = GcpCompute.for_emulator(client.url)
    found |= {("disk", d.name) for d in compute.list_disks(project, ZONE)}
    found |= {("snapshot", s.name) for s in compute.list_snapshots(project)}
    return found


def test_a_crashed_create_is_found_and_yes_deletes_exactly_what_was_listed(
        ctx, local_cloud, project, tmp_path, monkeypatch, cli):
    from tpujob.clients import make_cloud, make_compute

    monkeypatch.setenv("TPUJOB_ZONE", ZONE)  # the store forgets its only job below

    # A sweep killed right after its create went through, and the job then forgotten: the
    # node is left behind, labelled with this store's id and the job's.
    job = record(ctx, tmp_path)
    [(code, out, err)] = finish(requeue_processes(1, env_extra={"TPUJOB_CRASH_AT": "slice-requested"}))
    assert code == -9, (out, err)
    slice_name = ctx.store.current_attempt(job.id).slice_name
    [node] = api_list(local_cloud, project, ZONE, "nodes")
    assert node["labels"] == {"tpujob-job": f"{job.id:06d}", "tpujob-attempt": "1",
                              "tpujob-store": _store_id(ctx)}
    ctx.store.remove(job.id)
    # A crashed clone: the job's snapshot and disk, and a master nobody labelled.
    compute = make_compute(ctx.settings)
    compute.create_disk(project, ZONE, "master", disk_type="pd-balanced", size_gb=100)
    owner = {"tpujob-job": "000077"}
    compute.create_snapshot(project, ZONE, "master", "master-src-000077", labels=owner)
    compute.create_disk(project, ZONE, "master-000077", disk_type="pd-balanced",
                        snapshot="master-src-000077", labels=owner, read_only=True)
    make_cloud(ctx.settings).create_queued_resource(_request(project, "tpujob-000077-1", owner, queued=True))

    listed = cli("gc", "--json")
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)
    # The queued resource came up: its node is listed beside it (the node carries its labels).
    leftovers = {("node", slice_name), ("queued-resource", "tpujob-000077-1"),
                 ("node", "tpujob-000077-1"), ("disk", "master-000077"),
                 ("snapshot", "master-src-000077")}
    assert _names(rows) == leftovers
    by_name = {r["name"]: r for r in rows if r["kind"] != "queued-resource"}
    assert by_name[slice_name]["why"] == f"job {job.id:06d} is not in this store (deleted)"
    assert by_name[slice_name]["store"] == _store_id(ctx)
    assert by_name[slice_name]["cost_per_hour_usd"] == 3.86  # v4-8 at the spot rate (the spec default)
    size = compute.get_disk(project, ZONE, "master-000077").size_gb
    assert by_name["master-000077"]["cost_per_hour_usd"] == round(0.10 * size / 730, 4)  # pd-balanced
    assert all(r["age_seconds"] >= 0 for r in rows)
    # Every resource made through the cloud layer carries this store's id.
    assert {r["store"] for r in rows} == {_store_id(ctx)}
    [qr] = api_list(local_cloud, project, ZONE, "queuedResources")
    assert qr["tpu"]["nodeSpec"][0]["node"]["labels"] == {"tpujob-job": "000077",
                                                          "tpujob-store": _store_id(ctx)}
    assert set(rows[0]) == {"kind", "name", "zone", "job", "store", "why", "state", "age_seconds",
                            "cost_per_hour_usd"}
    # The table says the same, with the hint.
    table = cli("gc")
    assert table.code == 0 and slice_name in table.out and "tpujob gc --yes" in table.out

    before = _cloud_names(local_cloud, project)
    done = cli("gc", "--yes")
    assert done.code == 0, done.err
    assert f"deleted node {slice_name} in {ZONE}" in done.out
    assert "deleted snapshot master-src-000077" in done.out
    assert _cloud_names(local_cloud, project) == before - leftovers == {("disk", "master")}
    assert json.loads(cli("gc", "--json").out) == []


def test_another_stores_resources_are_never_touched(ctx, local_cloud, project, tmp_path, monkeypatch, cli):
    from tpujob.clients import make_cloud, make_compute
    from tpujob.names import clone_name, slice_name, store_tag
    from tpujob.service import gc

    other = _other_store(monkeypatch, tmp_path)
    monkeypatch.setenv("TPUJOB_ZONE", ZONE)
    # Made under the other store's labels and names, as its create would (its job 1 is not ours).
    theirs = {"tpujob-job": "000001", "tpujob-store": _store_id(other)}
    node, disk = slice_name(1, 1, store_tag(_store_id(other))), clone_name("data", 1, store_tag(_store_id(other)))
    make_cloud(ctx.settings).create_node(_request(project, node, theirs))
    make_compute(ctx.settings).create_disk(project, ZONE, disk, disk_type="pd-balanced", labels=theirs)
    nodes = api_list(local_cloud, project, ZONE, "nodes")
    assert nodes[0]["labels"]["tpujob-store"] == _store_id(other)  # theirs, not overwritten

    assert json.loads(cli("gc", "--json").out) == []
    # Not even a day later, when no program runs on them (its hosts do not take our key).
    assert gc.find(ctx, [ZONE], now=time.time() + 86400) == []
    # The other store sees them as its own orphans (its job 1 is not on its record) at any age.
    monkeypatch.setenv("TPUJOB_HOME", str(tmp_path / "other-home"))
    rows = json.loads(cli("gc", "--json").out)
    assert _names(rows) == {("node", node), ("disk", disk)}
    assert {r["why"] for r in rows} == {"job 000001 is not in this store (deleted)"}
    assert cli("gc", "--yes").code == 0
    assert api_list(local_cloud, project, ZONE, "nodes") == []


def test_two_stores_job_1_get_a_slice_each_and_gc_keeps_to_its_own(ctx, local_cloud, project, tmp_path,
                                                                   monkeypatch, cli):
    """Two stores (two labs, a test store and a real one) on one project: each one's job 1 gets a
    slice of its own (none adopted through the already-exists path), and one store's gc never
    lists nor deletes the other's, whatever their age."""
    from tpujob.service import gc
    from tpujob.service.context import Context

    monkeypatch.setenv("TPUJOB_ZONE", ZONE)
    job_a = sweep_until(ctx, record(ctx, tmp_path).id, running)
    home_a, id_a = os.environ["TPUJOB_HOME"], _store_id(ctx)  # (a Context reads its home when first asked)
    monkeypatch.setenv("TPUJOB_HOME", str(tmp_path / "home-b"))
    ctx_b = Context.load()
    job_b = sweep_until(ctx_b, record(ctx_b, tmp_path).id, running)
    assert job_a.id == job_b.id == 1
    slice_a = ctx.store.current_attempt(job_a.id).slice_name
    slice_b = ctx_b.store.current_attempt(job_b.id).slice_name
    assert slice_a != slice_b
    labels = {n["name"].rsplit("/", 1)[-1]: n["labels"]["tpujob-store"]
              for n in api_list(local_cloud, project, ZONE, "nodes")}
    assert labels == {slice_a: id_a, slice_b: _store_id(ctx_b)}  # B made its own
    assert ctx.store.get(job_a.id).state == "RUNNING" and ctx.store.get(job_a.id).attempt == 1

    # Both jobs end, their slices kept: each is its own store's orphan, never the other's.
    assert cli("cancel", str(job_b.id)).code == 0
    found = gc.find(ctx_b, [ZONE], now=time.time() + 86400)  # a day on: age changes nothing
    assert {(x.kind, x.name) for x in found} == {("node", slice_b)}
    monkeypatch.setenv("TPUJOB_HOME", home_a)
    assert cli("cancel", str(job_a.id)).code == 0
    monkeypatch.setenv("TPUJOB_HOME", str(tmp_path / "home-b"))
    done = cli("gc", "--yes")
    assert done.code == 0, done.err
    remaining = {n["name"].rsplit("/", 1)[-1] for n in api_list(local_cloud, project, ZONE, "nodes")}
    assert remaining == {slice_a}
    monkeypatch.setenv("TPUJOB_HOME", home_a)
    assert _names(json.loads(cli("gc", "--json").out)) == {("node", slice_a)}


def test_a_running_jobs_resources_are_never_listed(ctx, local_cloud, project, tmp_path, cli):
    from tpujob.cloud.tpu_api import GcpCloud

    job = sweep_until(ctx, record(ctx, tmp_path).id, running)
    slice_name = ctx.store.current_attempt(job.id).slice_name
    [node] = api_list(local_cloud, project, ZONE, "nodes")
    assert node["labels"]["tpujob-store"] == _store_id(ctx)
    # The same job id under no store label (made before stores had ids): still not listed.
    GcpCloud.for_emulator(local_cloud.url).create_node(
        _request(project, "legacy", {"tpujob-job": f"{job.id:06d}"}))
    result = cli("gc", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == []
    assert cli("gc", "--yes").code == 0
    assert {n["name"].rsplit("/", 1)[-1] for n in api_list(local_cloud, project, ZONE, "nodes")} \
        == {slice_name, "legacy"}
    # Once the job ended, its slice is an orphan at any age; the unstamped one is no store's:
    # never touched.
    assert cli("cancel", str(job.id)).code == 0
    rows = json.loads(cli("gc", "--json").out)
    assert [(r["kind"], r["name"], r["why"]) for r in rows] == [
        ("node", slice_name, f"job {job.id:06d} ended (CANCELLED)")]


def test_bad_input_is_refused_before_anything(ctx, local_cloud, project, cli):
    from tpujob.clients import make_compute

    compute = make_compute(ctx.settings)
    compute.create_disk(project, ZONE, "c-000052", disk_type="pd-balanced", labels={"tpujob-job": "000052"})
    result = cli("gc", "--yes", "--zone", "mars-1a")
    assert result.code == 2
    assert "unknown zone 'mars-1a'" in result.error_line
    assert [d.name for d in compute.list_disks(project, ZONE)] == ["c-000052"]  # nothing deleted


def test_doctor_counts_the_leftovers(ctx, local_cloud, project, monkeypatch, cli):
    from tpujob.clients import make_cloud

    monkeypatch.setenv("TPUJOB_ZONE", ZONE)
    mine = {"tpujob-job": "000009", "tpujob-store": _store_id(ctx)}
    make_cloud(ctx.settings).create_queued_resource(_request(project, "tpujob-000009-1", mine, queued=True))
    report = json.loads(cli("doctor", "--json").out)
    [check] = [c for c in report["cloud"] if c["name"] == "orphans"]
    assert check["status"] == "warning"
    # The queued resource and the node it made.
    assert check["detail"].startswith("2 leftover resources no active job owns")


def test_a_failed_deletion_is_reported_and_the_others_go_on(ctx, local_cloud, project, monkeypatch, cli):
    from tpujob.clients import make_compute

    monkeypatch.setenv("TPUJOB_ZONE", ZONE)
    compute = make_compute(ctx.settings)
    for name in ("a-000051", "b-000051"):
        compute.create_disk(project, ZONE, name, disk_type="pd-balanced", labels={"tpujob-job": "000051"})
    # Compute's 403 for a missing permission (not retried): the first deletion fails.
    local_cloud.fail_next("compute.disks.delete", 403,
                          f"Required 'compute.disks.delete' permission for "
                          f"'projects/{project}/zones/{ZONE}/disks/a-000051'")
    try:
        result = cli("gc", "--yes", "--json")
    finally:
        local_cloud.clear_fail_next()
    assert result.code == 5
    assert "1 of 2 could not be deleted (first: disk a-000051" in result.error_line
    rows = {r["name"]: r for r in json.loads(result.out)}
    assert rows["b-000051"]["deleted"] is True and rows["b-000051"]["error"] is None
    assert rows["a-000051"]["deleted"] is False and "compute.disks.delete" in rows["a-000051"]["error"]
    assert {d.name for d in compute.list_disks(project, ZONE)} == {"a-000051"}


def test_a_lost_jobs_mig_slice_goes_with_its_template_and_policy(ctx, local_cloud, project, monkeypatch, cli):
    """On the Compute Engine path: a multi-host slice whose job is gone from the store is one
    leftover (its MIG, deleted with its template and policy), and a create that crashed before
    its MIG leaves a template and a policy that are listed and deleted each."""
    from tpujob.clients import make_cloud
    from tpujob.cloud.base import SliceRequest
    from tpujob.names import slice_name

    zone = "us-east5-a"  # offers v6e (emulator/apis/compute/tpu_vm_rules.py)
    monkeypatch.setenv("TPUJOB_ZONE", zone)
    compute = make_cloud(ctx.settings).for_api("compute")

    def request(name: str, job: str) -> SliceRequest:
        return SliceRequest(project=project, zone=zone, name=name, accelerator_type="v6e-16",
                            runtime_version="", api="compute", labels={"tpujob-job": job},
                            provisioning="reservation", reservation="r1")  # bulk mode: no spot

    tag = ctx.store.store_tag  # a policy is told as this store's by the tag in its name
    lost, crashed_name = slice_name(42, 1, tag), slice_name(43, 1, tag)
    compute.request_node(request(lost, "000042"))
    crashed = request(crashed_name, "000043")
    compute._insert_and_wait("policy", compute._policies.insert, f"projects/{project}/regions/us-east5",
                             project=project, region="us-east5",
                             resource_policy_resource=compute._workload_policy(crashed))
    compute._insert_and_wait("template", compute._templates.insert, f"projects/{project}/global",
                             project=project, instance_template_resource=compute._template(crashed))
    rows = json.loads(cli("gc", "--json").out)
    assert _names(rows) == {("mig", lost), ("instance-template", crashed_name),
                            ("workload-policy", crashed_name)}
    assert {r["why"] for r in rows} == {"job 000042 is not in this store (deleted)",
                                        "job 000043 is not in this store (deleted)"}
    assert {r["store"] for r in rows} == {_store_id(ctx)}
    done = cli("gc", "--yes")
    assert done.code == 0, done.err
    assert f"deleted mig {lost} in {zone}" in done.out
    assert compute.list_tpu_resources(project, zone) == []
    assert list(compute._templates.list(project=project)) == []
    assert list(compute._policies.list(project=project, region="us-east5")) == []
    assert compute.list_slices(project, zone) == {}

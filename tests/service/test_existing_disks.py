"""A read-only disk that is not a clone must exist before the job: `create` (and `create
--dry-run`) asks Compute once per such disk and refuses before anything is recorded or created.
Against the shared background emulator, through the CLI."""

from __future__ import annotations

import pytest
from disk_helpers import PROJECT, ZONE

SPEC = f"""\
name: reader
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}
disks:
  - {{name: {{disk}}, mode: read-only, mount: /mnt/data}}
run: {{command: "true"}}
"""


@pytest.fixture
def clients(shared_emulator, local_cloud):
    from tpujob.cloud.disks import GcpCompute
    from tpujob.cloud.tpu_api import GcpCloud

    return (GcpCloud.for_emulator(shared_emulator["tpu_endpoint"]),
            GcpCompute.for_emulator(shared_emulator["compute_endpoint"], shared_emulator["tpu_endpoint"]))


def _resources(clients) -> tuple[set, set]:
    cloud, compute = clients
    return set(cloud.list_slices(PROJECT, ZONE)), {d.name for d in compute.list_disks(PROJECT, ZONE)}


def _spec(spec_file, disk):
    return spec_file(SPEC.replace("{disk}", disk))


def test_a_missing_read_only_disk_is_refused_before_anything_is_recorded_or_created(
        cli, spec_file, stored_jobs, clients):
    before = _resources(clients)
    for args in (("create",), ("create", "--dry-run")):
        refused = cli(*args, _spec(spec_file, "no-such-data"))
        assert refused.code == 3, refused
        assert "disk no-such-data does not exist in us-central2-b" in refused.error_line
        assert f"`tpujob disk clone SNAPSHOT --name no-such-data --zone {ZONE}`" in refused.error_line
        assert refused.out == ""
    assert stored_jobs() == 0
    assert _resources(clients) == before  # no slice, and no empty disk made for it


def test_an_existing_disk_passes_and_one_google_would_not_attach_is_refused(cli, spec_file, stored_jobs,
                                                                           clients):
    _, compute = clients
    compute.create_disk(PROJECT, ZONE, "reader-old-pd", disk_type="pd-standard")
    compute.create_disk(PROJECT, ZONE, "reader-data", disk_type="pd-balanced")
    wrong = cli("create", "--dry-run", _spec(spec_file, "reader-old-pd"))
    assert wrong.code == 2 and "disk reader-old-pd is pd-standard; v4-8 takes pd-balanced" in wrong.error_line
    plan = cli("create", "--dry-run", _spec(spec_file, "reader-data"))
    assert plan.code == 0, plan.err
    assert "existing, read-only" in plan.out
    assert stored_jobs() == 0
    for name in ("reader-old-pd", "reader-data"):
        compute.delete_disk(PROJECT, ZONE, name)


def test_an_existing_single_writer_hyperdisk_is_refused_for_read_only_use(cli, spec_file, stored_jobs, clients):
    _, compute = clients
    zone = "us-east5-b"  # a v6e zone
    compute.create_disk(PROJECT, zone, "reader-master", disk_type="hyperdisk-ml")  # READ_WRITE_SINGLE
    spec = spec_file(SPEC.replace("{disk}", "reader-master").replace("v4-8", "v6e-8").replace(ZONE, zone))
    refused = cli("create", spec)
    assert refused.code == 2, refused
    assert ("disk reader-master is a hyperdisk-ml disk with access mode READ_WRITE_SINGLE, which cannot be "
            "attached read-only") in refused.error_line
    assert stored_jobs() == 0
    compute.delete_disk(PROJECT, zone, "reader-master")


def test_a_clones_missing_snapshot_or_master_is_refused_naming_what_makes_it(cli, spec_file, stored_jobs,
                                                                               clients):
    before = _resources(clients)
    snap = spec_file(f"name: reader\ntpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}\n"
                     "disks: [{name: data, snapshot: no-such-snap, mount: /mnt/data}]\nrun: {command: 'true'}\n")
    refused = cli("create", snap)
    assert refused.code == 3
    assert refused.error_line == (
        f"error: snapshot no-such-snap (the source of disk data) does not exist in {PROJECT}: make it from "
        f"the disk holding the data with `tpujob disk snapshot DISK --name no-such-snap --zone {ZONE}`")
    master = spec_file(f"name: reader\ntpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}\n"
                       "disks: [{name: data, source_disk: no-such-master, mount: /mnt/data}]\n"
                       "run: {command: 'true'}\n")
    refused = cli("create", "--dry-run", master)
    assert refused.code == 3
    assert refused.error_line.startswith(f"error: disk no-such-master (source_disk of data) does not exist in "
                                         f"{ZONE} ({PROJECT}): make it read-write on a single-host dev slice")
    assert stored_jobs() == 0
    assert _resources(clients) == before

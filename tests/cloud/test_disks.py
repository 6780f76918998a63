"""google-cloud-compute's real clients against the emulated Compute API: snapshot, clone from a
snapshot and from a disk, attach at node creation and later, delete."""

from __future__ import annotations

import pytest
from disk_helpers import PROJECT, ZONE, disk_dir

from tpujob.cloud.base import DataDisk, SliceRequest
from tpujob.errors import CloudError, ConflictError, NotFoundError


def test_snapshot_then_clone_copies_the_data_and_leaves_the_master_alone(server, compute):
    master = compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-balanced", size_gb=20)
    assert (master.name, master.type, master.size_gb, master.status) == (
        "master", "pd-balanced", 20, "READY")
    (disk_dir(server, "master") / "data.txt").write_text("v1")
    snap = compute.create_snapshot(PROJECT, ZONE, "master", "master-snap")
    assert (snap.name, snap.source_disk, snap.status) == ("master-snap", "master", "READY")
    (disk_dir(server, "master") / "data.txt").write_text("v2")  # after the snapshot

    clone = compute.create_disk(PROJECT, ZONE, "clone", disk_type="pd-balanced",
                                snapshot="master-snap")
    assert clone.source_snapshot == "master-snap"
    assert (disk_dir(server, "clone") / "data.txt").read_text() == "v1"
    assert [d.name for d in compute.list_disks(PROJECT, ZONE)] == ["clone", "master"]
    assert [s.name for s in compute.list_snapshots(PROJECT)] == ["master-snap"]


def test_clone_from_a_disk_and_deletes(server, compute):
    compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-standard")
    (disk_dir(server, "master") / "f").write_text("x")
    clone = compute.create_disk(PROJECT, ZONE, "copy", disk_type="pd-standard", source_disk="master")
    assert clone.source_disk == "master"
    assert (disk_dir(server, "copy") / "f").read_text() == "x"
    compute.delete_disk(PROJECT, ZONE, "copy")
    assert not disk_dir(server, "copy").exists()
    compute.delete_disk(PROJECT, ZONE, "copy")  # already gone: fine
    with pytest.raises(NotFoundError):
        compute.get_disk(PROJECT, ZONE, "copy")
    assert compute.find_disk(PROJECT, ZONE, "copy") is None
    with pytest.raises(ConflictError):
        compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-standard")
    with pytest.raises(NotFoundError):
        compute.create_disk(PROJECT, ZONE, "c2", disk_type="pd-standard", snapshot="nope")
    compute.create_snapshot(PROJECT, ZONE, "master", "s1")
    compute.delete_snapshot(PROJECT, "s1")
    compute.delete_snapshot(PROJECT, "s1")
    assert compute.list_snapshots(PROJECT) == []
    assert compute.api_calls > 0


def _request(name, accelerator, disks):
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator,
                        runtime_version="tpu-ubuntu2204-base", provisioning="on-demand",
                        data_disks=tuple(disks))


def test_attach_at_create_and_later_and_the_in_use_rules(server, compute, cloud):
    compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-balanced")
    compute.create_disk(PROJECT, ZONE, "data", disk_type="pd-balanced")
    source = f"projects/{PROJECT}/zones/{ZONE}/disks/master"
    cloud.create_node(_request("dev", "v4-8", [DataDisk(source, read_only=False)]))
    assert compute.node_disks(PROJECT, ZONE)[0].node == "dev"
    assert not compute.node_disks(PROJECT, ZONE)[0].read_only
    assert compute.get_disk(PROJECT, ZONE, "master").users == ("dev",)

    # Read-write on one node: no other node may attach it, in either mode.
    with pytest.raises(CloudError, match="already being used"):
        cloud.create_node(_request("pod", "v4-32", [DataDisk(source, read_only=True)]))
    # Read-write on many hosts: refused by the API.
    data = f"projects/{PROJECT}/zones/{ZONE}/disks/data"
    with pytest.raises(CloudError, match="READ_ONLY"):
        cloud.create_node(_request("pod", "v4-32", [DataDisk(data, read_only=False)]))
    # In use: cannot be deleted.
    with pytest.raises(CloudError, match="already being used"):
        compute.delete_disk(PROJECT, ZONE, "master")

    cloud.create_node(_request("pod", "v4-32", [DataDisk(data, read_only=True)]))
    attached = {(d.node, d.source, d.read_only) for d in compute.node_disks(PROJECT, ZONE)}
    assert attached == {("dev", source, False), ("pod", data, True)}

    cloud.delete_node(PROJECT, ZONE, "dev")
    assert compute.get_disk(PROJECT, ZONE, "master").users == ()
    compute.delete_disk(PROJECT, ZONE, "master")

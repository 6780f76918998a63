"""What Google refuses about a TPU's disks, through the real clients against the emulator: a
disk type the generation does not take (node create, queued-resource create), a
Hyperdisk's access mode against the attach mode, an access mode on a Persistent Disk; and the
access modes tpujob gives a Hyperdisk ML master and its clone."""

from __future__ import annotations

import re

import pytest
from disk_helpers import PROJECT, ZONE
from spec_texts import resolved_spec

from tpujob.attempt import slice_disks as disks
from tpujob.cloud.base import DataDisk, SliceRequest
from tpujob.errors import CloudError

V6E_ZONE = "us-east5-b"  # a zone Google offers v6e in (ZONE, us-central2-b, is v4's)
RUNTIME = {"v4": "tpu-ubuntu2204-base", "v6e": "v2-alpha-tpuv6e"}


def _request(name, accelerator, zone, disks, queued=False):
    return SliceRequest(project=PROJECT, zone=zone, name=name, accelerator_type=accelerator,
                        runtime_version=RUNTIME[accelerator.split("-")[0]], provisioning="on-demand",
                        queued=queued, data_disks=tuple(disks))


def _source(zone, name):
    return f"projects/{PROJECT}/zones/{zone}/disks/{name}"


def _emulated(server, zone, name) -> dict:
    """The disk as the emulator's Compute API keeps it."""
    return server.emulator.compute.get_disk(PROJECT, zone, name)


def _nothing_left(cloud, zone):
    assert cloud.list_slices(PROJECT, zone) == {}


@pytest.mark.parametrize("disk_type, accelerator, zone", [
    ("pd-standard", "v4-8", ZONE),     # v4 takes Balanced PD only
    ("pd-balanced", "v6e-8", V6E_ZONE),  # v6e takes no Persistent Disk
])
def test_a_disk_type_the_generation_does_not_take_is_refused_everywhere(server, compute, cloud,
                                                                         disk_type, accelerator, zone):
    compute.create_disk(PROJECT, zone, "data", disk_type=disk_type)
    wording = re.escape(f"[{disk_type}, {accelerator}] features are not compatible for creating instance.")
    disk = DataDisk(_source(zone, "data"), read_only=False)
    with pytest.raises(CloudError, match=wording):
        cloud.create_node(_request("direct", accelerator, zone, [disk]))
    with pytest.raises(CloudError, match=wording):
        cloud.create_queued_resource(_request("queued", accelerator, zone, [disk], queued=True))
    _nothing_left(cloud, zone)
    assert _emulated(server, zone, "data").get("users") is None

    assert compute.node_disks(PROJECT, zone) == []


def test_the_types_google_lists_are_attached(server, compute, cloud):
    compute.create_disk(PROJECT, ZONE, "pd", disk_type="pd-balanced")
    compute.create_disk(PROJECT, V6E_ZONE, "ml", disk_type="hyperdisk-ml")
    compute.create_disk(PROJECT, V6E_ZONE, "hb", disk_type="hyperdisk-balanced")
    cloud.create_node(_request("v4", "v4-8", ZONE, [DataDisk(_source(ZONE, "pd"), read_only=False)]))
    cloud.create_node(_request("v6e", "v6e-8", V6E_ZONE, [DataDisk(_source(V6E_ZONE, "ml"), read_only=False),
                                                          DataDisk(_source(V6E_ZONE, "hb"), read_only=False)]))
    assert {(d.node, d.source.rsplit("/", 1)[-1]) for d in compute.node_disks(PROJECT, V6E_ZONE)} == {
        ("v6e", "ml"), ("v6e", "hb")}


def _spec(zone, *disks):
    return resolved_spec(project=PROJECT, zone=zone, disks=disks, disk_type="hyperdisk-ml",
                         accelerator="v6e-8", generation="v6e")


def test_a_hyperdisk_ml_master_is_single_writer_and_its_clone_read_only_many(server, compute, cloud):
    master = {"name": "master", "mode": "read-write", "mount": "/mnt/master"}
    disks.data_disks(compute, _spec(V6E_ZONE, master), 1, V6E_ZONE, "a1b2c3")
    assert _emulated(server, V6E_ZONE, "master")["accessMode"] == "READ_WRITE_SINGLE"
    assert compute.get_disk(PROJECT, V6E_ZONE, "master").access_mode == "READ_WRITE_SINGLE"

    clone = {"name": "data", "source_disk": "master", "mode": "read-only", "mount": "/mnt/data"}
    (disk,) = disks.data_disks(compute, _spec(V6E_ZONE, clone), 2, V6E_ZONE, "a1b2c3")
    assert _emulated(server, V6E_ZONE, "data-a1b2c3-000002")["accessMode"] == "READ_ONLY_MANY"

    # The clone goes to every host of a pod, read-only; the master to one host, read-write.
    cloud.create_node(_request("pod", "v6e-16", V6E_ZONE, [disk]))
    cloud.create_node(_request("dev", "v6e-8", V6E_ZONE, [DataDisk(_source(V6E_ZONE, "master"), read_only=False)]))
    assert {(d.node, d.read_only) for d in compute.node_disks(PROJECT, V6E_ZONE)} == {
        ("pod", True), ("dev", False)}


def test_a_hyperdisks_access_mode_must_match_the_attach_mode(server, compute, cloud):
    compute.create_disk(PROJECT, V6E_ZONE, "clone", disk_type="hyperdisk-ml", read_only=True)
    compute.create_disk(PROJECT, V6E_ZONE, "single", disk_type="hyperdisk-ml")
    compute.create_disk(PROJECT, V6E_ZONE, "balanced", disk_type="hyperdisk-balanced")
    assert _emulated(server, V6E_ZONE, "balanced")["accessMode"] == "READ_WRITE_SINGLE"

    with pytest.raises(CloudError, match=re.escape(
            "hyperdisk-ml disk with access mode READ_ONLY_MANY cannot be attached in read-write mode.")):
        cloud.create_node(_request("rw", "v6e-8", V6E_ZONE, [DataDisk(_source(V6E_ZONE, "clone"), read_only=False)]))
    for name, kind in (("single", "hyperdisk-ml"), ("balanced", "hyperdisk-balanced")):
        with pytest.raises(CloudError, match=re.escape(f"{kind} disk type cannot be attached in read-only mode.")):
            cloud.create_node(_request("ro", "v6e-16", V6E_ZONE, [DataDisk(_source(V6E_ZONE, name))]))
    _nothing_left(cloud, V6E_ZONE)


def test_compute_keeps_access_modes_to_hyperdisk(server):
    """Disk.accessMode "is only valid for Hyperdisk disk types" (compute.v1.json)."""
    from google.api_core import exceptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    disks = compute_v1.DisksClient(transport="rest", credentials=AnonymousCredentials(),
                                   client_options={"api_endpoint": server.url})

    def insert(name, disk_type, mode=None):
        disk = compute_v1.Disk(name=name, type_=f"zones/{ZONE}/diskTypes/{disk_type}")
        if mode:
            disk.access_mode = mode
        return disks.insert_unary(project=PROJECT, zone=ZONE, disk_resource=disk)

    with pytest.raises(exceptions.BadRequest, match=re.escape(
            "Invalid value for field 'resource.accessMode': 'READ_ONLY_MANY'. Cannot specify the "
            "access mode field for 'pd-balanced' disks.")):
        insert("pd", "pd-balanced", "READ_ONLY_MANY")
    insert("plain", "pd-balanced")
    assert "accessMode" not in _emulated(server, ZONE, "plain")
    insert("hd", "hyperdisk-ml")
    assert _emulated(server, ZONE, "hd")["accessMode"] == "READ_WRITE_SINGLE"  # Compute's default


def test_hyperdisk_balanced_is_never_read_only(http, compute, cloud):
    """Compute's insert of a READ_ONLY_MANY hyperdisk-balanced and the TPU's read-only attach of
    one in any access mode are refused with Google's 400 (tests/fixtures/gcp_errors/
    hyperdisk_balanced_read_only.json, quoted in google/cloud-forensics-utils#530)."""
    import json
    from pathlib import Path

    google = json.loads((Path(__file__).parent.parent / "fixtures" / "gcp_errors"
                         / "hyperdisk_balanced_read_only.json").read_text())

    def insert(name, mode):
        body = {"name": name, "type": f"zones/{V6E_ZONE}/diskTypes/hyperdisk-balanced", "accessMode": mode}
        return http("POST", f"/compute/v1/projects/{PROJECT}/zones/{V6E_ZONE}/disks", body)

    assert insert("clone", "READ_ONLY_MANY") == (google["status"], google["body"])
    with pytest.raises(CloudError, match=re.escape(google["message"])):  # through compute_v1 too
        compute.create_disk(PROJECT, V6E_ZONE, "clone", disk_type="hyperdisk-balanced", read_only=True)
    assert compute.find_disk(PROJECT, V6E_ZONE, "clone") is None
    assert insert("shared", "READ_WRITE_MANY")[0] == 200
    with pytest.raises(CloudError, match=re.escape(google["message"])):
        cloud.create_node(_request("ro", "v6e-16", V6E_ZONE, [DataDisk(_source(V6E_ZONE, "shared"))]))
    _nothing_left(cloud, V6E_ZONE)

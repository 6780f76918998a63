"""A job's disks against the emulated Compute and TPU APIs: one clone per job, reused by its
attempts, named when a reused slice lacks it, cloned from the global snapshot in a fallback
zone (never an empty disk there), deleted with the job and only with it."""

from __future__ import annotations

import pytest
from disk_helpers import PROJECT, ZONE
from spec_texts import resolved_spec

from tpujob.attempt import mounts
from tpujob.attempt import slice_disks as disks
from tpujob.cloud.base import SliceRequest
from tpujob.errors import ConflictError, UsageError


def job_spec(*disks):
    return resolved_spec(project=PROJECT, zone=ZONE, disks=disks)


TAG = "a1b2c3"  # a store's tag (tpujob/names.py store_tag): in every clone's name
DATA = {"name": "data", "snapshot": "snap", "mode": "read-only", "mount": "/mnt/data"}


@pytest.fixture
def snapshot(compute):
    compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-balanced")
    compute.create_snapshot(PROJECT, ZONE, "master", "snap")


def test_each_job_owns_its_clone_and_every_attempt_reuses_it(compute, snapshot):
    spec = job_spec(DATA)
    first = disks.data_disks(compute, spec, 5, ZONE, TAG)
    assert disks.data_disks(compute, spec, 5, ZONE, TAG) == first  # the next attempt: same clone
    second = disks.data_disks(compute, spec, 6, ZONE, TAG)
    assert [d.source.rsplit("/", 1)[-1] for d in first + second] == [f"data-{TAG}-000005", f"data-{TAG}-000006"]
    assert compute.get_disk(PROJECT, ZONE, f"data-{TAG}-000005").labels == {"tpujob-job": "000005"}

    assert disks.delete_clones(compute, spec, 5, {ZONE}, TAG) == [f"disk data-{TAG}-000005"]
    assert compute.find_disk(PROJECT, ZONE, f"data-{TAG}-000005") is None
    assert compute.find_disk(PROJECT, ZONE, f"data-{TAG}-000006") is not None  # the other job's


def test_two_stores_jobs_of_one_id_get_a_clone_each(compute, snapshot):
    """Another store's job 5 (tag b) must not adopt, nor delete, this store's job 5's clone."""
    spec = job_spec(DATA)
    (mine,) = disks.data_disks(compute, spec, 5, ZONE, TAG)
    (theirs,) = disks.data_disks(compute, spec, 5, ZONE, "d4e5f6")
    assert mine != theirs
    assert disks.delete_clones(compute, spec, 5, {ZONE}, "d4e5f6") == ["disk data-d4e5f6-000005"]
    assert compute.find_disk(PROJECT, ZONE, f"data-{TAG}-000005") is not None


def test_a_disk_of_the_clones_name_that_is_not_the_jobs_is_neither_adopted_nor_deleted(compute, snapshot):
    compute.create_disk(PROJECT, ZONE, f"data-{TAG}-000007", disk_type="pd-balanced")  # made by hand
    spec = job_spec(DATA)
    with pytest.raises(ConflictError, match="not job 000007's clone"):
        disks.data_disks(compute, spec, 7, ZONE, TAG)
    assert disks.delete_clones(compute, spec, 7, {ZONE}, TAG) == []
    assert compute.find_disk(PROJECT, ZONE, f"data-{TAG}-000007") is not None


def test_a_reused_slice_lacking_a_disk_is_named_not_patched(compute, cloud, snapshot):
    """Google's v2 UpdateNode documents no data_disks: a node gets its disks at create only."""
    spec = job_spec(DATA)
    cloud.create_node(SliceRequest(project=PROJECT, zone=ZONE, name="tpujob-000008-1",
                                   accelerator_type="v4-32", runtime_version="tpu-ubuntu2204-base",
                                   provisioning="on-demand"))
    assert disks.missing_disks(compute, spec, 8, ZONE, TAG, "tpujob-000008-1") == [f"data-{TAG}-000008"]
    assert compute.node_disks(PROJECT, ZONE) == []
    (disk,) = disks.data_disks(compute, spec, 8, ZONE, TAG)
    cloud.create_node(SliceRequest(project=PROJECT, zone=ZONE, name="tpujob-000008-2",
                                   accelerator_type="v4-32", runtime_version="tpu-ubuntu2204-base",
                                   provisioning="on-demand", data_disks=(disk,)))
    assert disks.missing_disks(compute, spec, 8, ZONE, TAG, "tpujob-000008-2") == []


def test_mount_script_names_the_clone_and_the_file_cache():
    spec = resolved_spec(project=PROJECT, zone=ZONE, disks=[DATA], buckets=[
        {"bucket": "b", "mount": "/mnt/b", "read_only": False, "metadata_ttl_secs": 60,
         "only_dir": None, "cache_dir": "/tmp/cache dir", "file_cache_max_size_mb": 512}])
    script = mounts.mount_script(spec, 9, TAG)
    assert f"disk=data-{TAG}-000009" in script
    assert "cache_dir='/tmp/cache dir'" in script and "file_cache_mb=512" in script


FALLBACK_ZONE = "us-central1-a"


def test_a_fallback_zone_gets_a_clone_of_the_global_snapshot_never_an_empty_disk(compute):
    """The master lives in the primary zone: its snapshot (global) is taken there and the clone
    made from it in the fallback zone; a read-write master cannot follow and is not replaced by
    an empty disk of its name."""
    compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-balanced")
    spec = job_spec({"name": "data", "source_disk": "master", "mode": "read-only", "mount": "/mnt/data"})
    (disk,) = disks.data_disks(compute, spec, 9, FALLBACK_ZONE, TAG)
    assert disk.source.endswith(f"/zones/{FALLBACK_ZONE}/disks/data-{TAG}-000009")
    clone = compute.get_disk(PROJECT, FALLBACK_ZONE, f"data-{TAG}-000009")
    assert clone.source_snapshot == f"data-src-{TAG}-000009"
    assert compute.get_snapshot(PROJECT, f"data-src-{TAG}-000009").source_disk == "master"

    master = job_spec({"name": "master", "mode": "read-write", "mount": "/mnt/master"})
    with pytest.raises(UsageError, match=f"disk master is in {ZONE} and cannot be attached in {FALLBACK_ZONE}"):
        disks.data_disks(compute, master, 9, FALLBACK_ZONE, TAG)
    assert compute.find_disk(PROJECT, FALLBACK_ZONE, "master") is None


def test_several_slices_each_get_the_disk_and_one_lacking_it_names_it(compute, cloud, snapshot):
    spec = job_spec(DATA)
    (disk,) = disks.data_disks(compute, spec, 9, ZONE, TAG)
    made = cloud.create_node(SliceRequest(project=PROJECT, zone=ZONE, name="tpujob-000009-1",
                                          accelerator_type="v4-32", runtime_version="tpu-ubuntu2204-base",
                                          provisioning="on-demand", data_disks=(disk,), slices=2))
    assert len(made.hosts) == 8  # two v4-32 slices of 4 hosts each, read as one
    assert {d.node for d in compute.node_disks(PROJECT, ZONE)} == {"tpujob-000009-1-0", "tpujob-000009-1-1"}
    assert disks.missing_disks(compute, spec, 9, ZONE, TAG, "tpujob-000009-1", slices=2) == []
    # A third slice the attempt does not have reads as lacking it.
    assert disks.missing_disks(compute, spec, 9, ZONE, TAG, "tpujob-000009-1", slices=3) == [f"data-{TAG}-000009"]

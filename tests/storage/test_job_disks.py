"""A job's disks against the emulated Compute and TPU APIs: one clone per job, reused by its
attempts, attached to a reused slice that lacks it, deleted with the job and only with it."""

from __future__ import annotations

import pytest

from spec_texts import resolved_spec
from storage_helpers import PROJECT, ZONE
from tpujob.cloud.base import SliceRequest
from tpujob.errors import ConflictError
from tpujob.service import disks, mounts


def job_spec(*disks):
    return resolved_spec(project=PROJECT, zone=ZONE, disks=disks)


DATA = {"name": "data", "snapshot": "snap", "mode": "read-only", "mount": "/mnt/data"}


@pytest.fixture
def snapshot(compute):
    compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-balanced")
    compute.create_snapshot(PROJECT, ZONE, "master", "snap")


def test_each_job_owns_its_clone_and_every_attempt_reuses_it(compute, snapshot):
    spec = job_spec(DATA)
    first = disks.data_disks(compute, spec, 5, ZONE)
    assert disks.data_disks(compute, spec, 5, ZONE) == first  # the next attempt: same clone
    second = disks.data_disks(compute, spec, 6, ZONE)
    assert [d.source.rsplit("/", 1)[-1] for d in first + second] == ["data-000005", "data-000006"]
    assert compute.get_disk(PROJECT, ZONE, "data-000005").labels == {"tpujob-job": "000005"}

    assert disks.delete_clones(compute, spec, 5, {ZONE}) == ["disk data-000005"]
    assert compute.find_disk(PROJECT, ZONE, "data-000005") is None
    assert compute.find_disk(PROJECT, ZONE, "data-000006") is not None  # the other job's


def test_a_disk_of_the_clones_name_that_is_not_the_jobs_is_neither_adopted_nor_deleted(compute, snapshot):
    compute.create_disk(PROJECT, ZONE, "data-000007", disk_type="pd-balanced")  # made by hand
    spec = job_spec(DATA)
    with pytest.raises(ConflictError, match="not job 000007's clone"):
        disks.data_disks(compute, spec, 7, ZONE)
    assert disks.delete_clones(compute, spec, 7, {ZONE}) == []
    assert compute.find_disk(PROJECT, ZONE, "data-000007") is not None


def test_a_reused_slice_lacking_a_disk_gets_it_attached(compute, cloud, snapshot):
    spec = job_spec(DATA)
    cloud.create_node(SliceRequest(project=PROJECT, zone=ZONE, name="tpujob-000008-1",
                                   accelerator_type="v4-32", runtime_version="tpu-ubuntu2204-base",
                                   provisioning="on-demand"))
    assert disks.attach_missing(compute, spec, 8, ZONE, "tpujob-000008-1") == ["data-000008"]
    assert [(d.node, d.read_only) for d in compute.node_disks(PROJECT, ZONE)] == [("tpujob-000008-1", True)]
    assert compute.get_disk(PROJECT, ZONE, "data-000008").users == ("tpujob-000008-1",)
    assert disks.attach_missing(compute, spec, 8, ZONE, "tpujob-000008-1") == []  # attached already


def test_mount_script_names_the_clone_and_the_file_cache():
    spec = resolved_spec(project=PROJECT, zone=ZONE, disks=[DATA], buckets=[
        {"bucket": "b", "mount": "/mnt/b", "read_only": False, "metadata_ttl_secs": 60,
         "only_dir": None, "cache_dir": "/tmp/cache dir", "file_cache_max_size_mb": 512}])
    script = mounts.mount_script(spec, 9)
    assert "disk=data-000009" in script
    assert "cache_dir='/tmp/cache dir'" in script and "file_cache_mb=512" in script

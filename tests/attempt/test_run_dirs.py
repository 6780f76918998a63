"""The run dir and the buckets through google-cloud-storage's real client against the emulator's
Cloud Storage: what the sweep reads without SSH, and the region check of `create`."""

from __future__ import annotations

import json
import time

import pytest
import requests
from spec_texts import resolved_spec

from tpujob.attempt import buckets, run_dirs
from tpujob.cloud.gcs import Gcs
from tpujob.emulator.server import EmulatorServer
from tpujob.errors import UsageError


@pytest.fixture(scope="module")
def gcs_server(tmp_path_factory):
    with EmulatorServer(tmp_path_factory.mktemp("emulator"), provisioning_delay=0.0) as srv:
        yield srv


@pytest.fixture
def gcs(gcs_server):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gstorage

    client = gstorage.Client(project="tpujob-local", credentials=AnonymousCredentials(),
                             client_options={"api_endpoint": gcs_server.info["storage_endpoint"]})
    return Gcs(client)


def spec(run_dir=None, buckets=(), zone="us-central2-b"):
    return resolved_spec(project="tpujob-local", zone=zone, run_dir=run_dir,
                         buckets=[{"bucket": b, "mount": f"/mnt/{b}"} for b in buckets])


def put(gcs, bucket, name, data):
    gcs.client.bucket(bucket).blob(name).upload_from_string(data)


def test_the_sweep_reads_each_attempts_files_in_one_list_per_prefix(gcs):
    gcs.client.create_bucket("runs-a")
    started = time.time() - 1
    put(gcs, "runs-a", "exp/000001/status.json", json.dumps(
        {"state": "succeeded", "step": 100, "message": "done", "exit_code": 0}))
    put(gcs, "runs-a", "exp/000001/heartbeat", json.dumps({"time": time.time(), "step": 100}))
    put(gcs, "runs-a", "exp/000001/checkpoints/100/data", b"x" * 1000)  # never listed
    put(gcs, "runs-a", "exp/000002/status.json", json.dumps({"state": "preempted", "step": 5}))
    put(gcs, "runs-a", "exp/000002/heartbeat", b"{}")
    later = time.time() + 5  # job 2's attempt began after its files: an earlier attempt's

    calls = gcs.api_calls
    seen = run_dirs.read_run_dirs(gcs, [(spec("gs://runs-a/exp"), 1, started),
                                       (spec("gs://runs-a/exp/"), 2, later),
                                       (spec("gs://runs-a/exp"), 3, started),
                                       (spec(None), 4, started)], now=time.time())
    assert gcs.api_calls - calls == 2  # one list, one download (job 1's status.json)
    assert set(seen) == {1, 2, 3}
    one = seen[1]
    assert (one.url, one.state, one.step, one.message, one.exit_code) == (
        "gs://runs-a/exp/000001", "succeeded", 100, "done", 0)
    assert 0 <= one.heartbeat_age < 30
    assert (seen[2].state, seen[2].heartbeat_age) == (None, None)  # the old attempt's files
    assert (seen[3].state, seen[3].heartbeat_age) == (None, None)  # nothing written yet


def test_a_stale_heartbeat_and_a_broken_status(gcs):
    gcs.client.create_bucket("runs-b")
    started = time.time() - 1
    put(gcs, "runs-b", "000007/heartbeat", b"{}")
    put(gcs, "runs-b", "000007/status.json", b"{not json")
    seen = run_dirs.read_run_dirs(gcs, [(spec("gs://runs-b"), 7, started)], now=time.time() + 1000)
    assert seen[7].heartbeat_age > 999
    assert seen[7].state is None and "status.json is not JSON" in seen[7].problem


def test_bucket_regions(gcs_server, gcs):
    for name in ("near", "far"):
        gcs.client.create_bucket(name)
    # gcp-storage-emulator creates every bucket in US (multi-region); move one to Europe.
    url = f"{gcs_server.info['storage_endpoint']}/storage/v1/b/far"
    assert requests.patch(url, json={"location": "EUROPE-WEST4"}, timeout=10).ok
    assert gcs.bucket_location("near") == ("US", [])

    assert buckets.check_bucket_regions(gcs, spec("gs://near/runs", ["near"]), strict=True) == []
    warnings = buckets.check_bucket_regions(gcs, spec(None, ["near", "far"]), strict=False)
    assert len(warnings) == 1
    assert "bucket far is in EUROPE-WEST4, the slice in us-central2" in warnings[0]
    assert "egress" in warnings[0]
    with pytest.raises(UsageError, match="far is in EUROPE-WEST4.*--strict"):
        buckets.check_bucket_regions(gcs, spec("gs://far/runs"), strict=True)
    # A US bucket is far from a European slice; a European one is not.
    assert buckets.check_bucket_regions(gcs, spec(None, ["far"], zone="europe-west4-a"), True) == []
    with pytest.raises(UsageError, match="does not exist: create it with `gcloud storage buckets create "
                                         "gs://nope --project .* --location us-central2`"):
        buckets.check_bucket_regions(gcs, spec(None, ["nope"]), strict=False)
    with pytest.raises(UsageError, match="bucket nope does not exist: create it with "
                                         "`tpujob emulator create-bucket nope`"):
        buckets.check_bucket_regions(gcs, spec(None, ["nope"]), strict=False, cloud="local")


@pytest.mark.parametrize("location,data,region,ok", [
    ("US-CENTRAL2", [], "us-central2", True), ("US", [], "us-east5", True),
    ("US", [], "europe-west4", False), ("EU", [], "europe-west4", True),
    ("NAM4", [], "us-central1", True), ("NAM4", [], "us-central2", False),
    ("US", ["US-CENTRAL1", "US-EAST4"], "us-central2", False),
    ("ASIA-EAST1", [], "us-central2", False),
])
def test_serves_region(location, data, region, ok):
    assert buckets.serves_region(location, data, region) is ok


@pytest.mark.parametrize("skew", [-600, 600])
def test_a_heartbeat_is_aged_on_the_storage_services_clock_not_the_nodes(gcs, monkeypatch, skew):
    # A lab node ten minutes off: a heartbeat written a moment ago would read 10 minutes old
    # (a hang: the job restarted) or from the future, judged on the node's clock.
    gcs.client.create_bucket(f"runs-skew{skew + 600}")
    monkeypatch.setenv("TPUJOB_CLOCK_SKEW_SECONDS", str(skew))
    started = time.time() - 1
    put(gcs, f"runs-skew{skew + 600}", "000009/heartbeat", json.dumps({"time": time.time(), "step": 3}))
    assert abs(gcs.now() - time.time()) < 3
    seen = run_dirs.read_run_dirs(gcs, [(spec(f"gs://runs-skew{skew + 600}"), 9, started)], now=gcs.now())
    assert 0 <= seen[9].heartbeat_age < 30

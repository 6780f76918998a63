"""`faults --api-error-rate` reaches the Compute API too, and google-cloud-compute's real client,
through GcpCompute's retry, rides out a 503."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from disk_helpers import PROJECT, ZONE

from tpujob.emulator.apis.errors import ApiError


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_error_rate_applies_to_compute_paths_and_not_to_the_switches(server):
    disks = f"{server.url}/compute/v1/projects/{PROJECT}/zones/{ZONE}/disks"
    assert _get(disks)[0] == 200
    server.emulator.world.set_faults(api_error_rate=1.0, provisioning_delay=None)
    try:
        codes = {_get(disks)[0] for _ in range(20)}
        code, body = _get(disks)
        assert codes <= {429, 503} and codes, codes
        assert body["error"]["code"] == code  # Google's error body, not an HTML page
        assert _get(f"{server.url}/emulator/v1/status")[0] == 200
    finally:
        server.emulator.world.set_faults(api_error_rate=0.0, provisioning_delay=None)
    assert _get(disks)[0] == 200


def test_the_compute_client_retries_a_503(server, compute, monkeypatch):
    """The first two Compute calls after the switch answer 503; the create still succeeds."""
    real = server.emulator.world.inject_api_error
    failures = []

    def two_503s():
        if len(failures) < 2:
            failures.append(503)
            return ApiError(503, "The service is currently unavailable (emulated)")
        return real()

    monkeypatch.setattr(server.emulator.world, "inject_api_error", two_503s)
    before = compute.api_calls
    disk = compute.create_disk(PROJECT, ZONE, "data", disk_type="pd-balanced", size_gb=10)
    assert (disk.name, disk.status) == ("data", "READY")
    assert failures == [503, 503]
    # The insert was sent three times (two 503s, then accepted), then the disk was read back.
    assert compute.api_calls - before >= 4


def test_the_compute_client_survives_a_flaky_api(server, compute):
    """At a 30 % error rate (429s and 503s) every call of a snapshot-and-clone still succeeds."""
    server.emulator.world.set_faults(api_error_rate=0.3, provisioning_delay=None)
    try:
        compute.create_disk(PROJECT, ZONE, "master", disk_type="pd-balanced")
        compute.create_snapshot(PROJECT, ZONE, "master", "snap")
        clone = compute.create_disk(PROJECT, ZONE, "clone", disk_type="pd-balanced", snapshot="snap")
        assert sorted(d.name for d in compute.list_disks(PROJECT, ZONE)) == ["clone", "master"]
    finally:
        server.emulator.world.set_faults(api_error_rate=0.0, provisioning_delay=None)
    assert clone.source_snapshot == "snap"

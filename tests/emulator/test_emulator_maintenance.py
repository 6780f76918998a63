"""Maintenance on an emulated node, read back through google-cloud-tpu: `upcomingMaintenance`
in the shapes of tpu.v2.json's UpcomingMaintenance (which the client's v2 Node lacks: tpujob
reads it from the same list answer's JSON), then health UNHEALTHY_MAINTENANCE once the window
opens."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tpujob.cloud.base import SliceRequest

PROJECT, ZONE = "p", "us-central2-b"
# tpu.v2.json (revision 20261001), schema UpcomingMaintenance: its properties and enums.
UPCOMING = {"type", "canReschedule", "windowStartTime", "windowEndTime", "latestWindowStartTime",
            "maintenanceStatus"}


def _cloud(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url)


def _raw_nodes(server) -> list[dict]:
    with urllib.request.urlopen(f"{server.url}/v2/projects/{PROJECT}/locations/{ZONE}/nodes") as answer:
        return json.loads(answer.read())["nodes"]


def test_announced_maintenance_is_read_from_the_one_list_call(server):
    cloud = _cloud(server)
    cloud.create_node(SliceRequest(project=PROJECT, zone=ZONE, name="n1", accelerator_type="v4-8",
                                   runtime_version="tpu-ubuntu2204-base"))
    assert cloud.list_slices(PROJECT, ZONE)["n1"].maintenance is None
    assert cloud.list_slices(PROJECT, ZONE)["n1"].health == "HEALTHY"

    server.emulator.host_faults.announce_maintenance("n1", 120)
    (raw,) = _raw_nodes(server)
    assert set(raw["upcomingMaintenance"]) == UPCOMING
    assert (raw["upcomingMaintenance"]["type"], raw["upcomingMaintenance"]["maintenanceStatus"]) == (
        "SCHEDULED", "PENDING")
    calls = cloud.api_calls
    seen = cloud.list_slices(PROJECT, ZONE)["n1"]
    assert cloud.api_calls - calls == 2  # the queued-resource list and the node list, nothing more
    assert (seen.maintenance.type, seen.maintenance.status) == ("SCHEDULED", "PENDING")
    assert seen.maintenance.start == pytest.approx(time.time() + 120, abs=5)
    assert seen.health == "HEALTHY"
    assert cloud.get_slice(PROJECT, ZONE, "n1").maintenance == seen.maintenance


def test_maintenance_at_once_makes_the_node_unhealthy(server):
    cloud = _cloud(server)
    cloud.create_node(SliceRequest(project=PROJECT, zone=ZONE, name="n2", accelerator_type="v4-8",
                                   runtime_version="tpu-ubuntu2204-base"))
    server.emulator.host_faults.announce_maintenance("n2")
    deadline = time.monotonic() + 10
    while cloud.list_slices(PROJECT, ZONE)["n2"].health != "UNHEALTHY_MAINTENANCE":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    seen = cloud.list_slices(PROJECT, ZONE)["n2"]
    assert (seen.maintenance.type, seen.maintenance.status) == ("UNSCHEDULED", "ONGOING")
    assert _raw_nodes(server)[0]["healthDescription"]

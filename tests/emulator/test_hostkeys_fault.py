"""`faults --hostkeys-delay`: a node's guest attributes carry its host keys only some time after
its hosts booted (Google's guest agent writes them on first boot), or never."""

from __future__ import annotations

import time

import pytest
from test_emulator_hosts import RecordingMachines, request

from tpujob.emulator.server import EmulatorServer

ZONE = "us-central2-b"


@pytest.fixture
def hosted(tmp_path):
    RecordingMachines.made = []
    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=RecordingMachines) as srv:
        from tpujob.cloud.tpu_api import GcpCloud
        from tpujob.emulator.client import EmulatorClient

        yield EmulatorClient(srv.url), GcpCloud.for_emulator(srv.url, poll_interval=0.01)


def test_host_keys_are_withheld_until_the_delay_passed(hosted):
    client, cloud = hosted
    # Withheld while the delay runs (an hour: no loaded machine reads them past it), then
    # published once a delay set shorter has passed: waited for, never slept on.
    assert client.set_faults(hostkeys_delay=3600)["hostkeysDelay"] == 3600
    cloud.create_node(request("n1"))
    assert cloud.host_keys("p", ZONE, "n1") == {0: [], 1: []}
    assert client.set_faults(hostkeys_delay=0.5)["hostkeysDelay"] == 0.5
    published = {0: ["ssh-ed25519 AAAAkey0"], 1: ["ssh-ed25519 AAAAkey1"]}
    deadline = time.monotonic() + 120  # bounds a hang only
    while cloud.host_keys("p", ZONE, "n1") != published:
        assert time.monotonic() < deadline, cloud.host_keys("p", ZONE, "n1")
        time.sleep(0.05)


def test_a_negative_delay_withholds_them_until_it_is_lifted(hosted):
    client, cloud = hosted
    client.set_faults(hostkeys_delay=-1)
    cloud.create_node(request("n1", "v4-8"))
    time.sleep(0.2)
    assert cloud.host_keys("p", ZONE, "n1") == {0: []}
    client.set_faults(hostkeys_delay=0)
    assert cloud.host_keys("p", ZONE, "n1") == {0: ["ssh-ed25519 AAAAkey0"]}


def test_the_cli_sets_and_shows_the_delay(cli, local_cloud):
    try:
        result = cli("emulator", "faults", "--hostkeys-delay", "-1")
        assert result.code == 0, result.err
        assert "host keys never published" in result.out
        result = cli("emulator", "faults", "--hostkeys-delay", "2.5")
        assert "host keys published 2.5 s after boot" in result.out
        assert local_cloud.set_faults()["hostkeysDelay"] == 2.5
    finally:
        local_cloud.set_faults(hostkeys_delay=0)

"""How the server drives the hosts of a node (machines.py's contract) with a recording double."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.emulator.server import EmulatorServer
from tpujob.errors import CloudError

ZONE = "us-central2-b"


@dataclass(frozen=True)
class Endpoint:
    index: int
    ip: str
    ssh_port: int
    host_key: str


class RecordingMachines:
    made: list[RecordingMachines] = []

    def __init__(self, root, node_id, num_hosts, authorized_keys, ip_block, ssh_port, external_ips=None,
                 login=None):
        self.args = dict(root=root, node_id=node_id, num_hosts=num_hosts,
                         authorized_keys=authorized_keys, ip_block=ip_block, ssh_port=ssh_port,
                         external_ips=external_ips)
        self.calls: list[tuple] = []
        RecordingMachines.made.append(self)

    def start(self):
        self.calls.append(("start",))
        return [Endpoint(i, f"127.16.{self.args['ip_block']}.{i + 1}", self.args["ssh_port"],
                         f"ssh-ed25519 AAAAkey{i} root@host{i}")
                for i in range(self.args["num_hosts"])]

    def preempt(self, grace_seconds):
        self.calls.append(("preempt", grace_seconds))

    def kill_host(self, index):
        self.calls.append(("kill_host", index))

    def stop(self):
        self.calls.append(("stop",))

    def host_root(self, index):
        return self.args["root"] / f"host-{index}"

    def ssh_connections(self, index):
        return {}


class BrokenMachines(RecordingMachines):
    def start(self):
        raise OSError("no namespaces here")


@pytest.fixture
def hosted(tmp_path):
    RecordingMachines.made = []
    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=RecordingMachines, preempt_grace=0.5) as srv:
        from tpujob.cloud.tpu_api import GcpCloud

        yield srv, GcpCloud.for_emulator(srv.url, poll_interval=0.01)


def request(name, accelerator="v4-16", **kw):
    return SliceRequest(project="p", zone=ZONE, name=name, accelerator_type=accelerator,
                        runtime_version="tpu-ubuntu2204-base", **kw)


def eventually(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def test_hosts_start_with_the_nodes_keys_and_publish_host_keys(hosted, tmp_path):
    server, cloud = hosted
    s = cloud.create_node(request("n1", ssh_keys=("tpujob:ssh-ed25519 AAAAuser tpujob",
                                                  "alice:ssh-rsa AAAAalice alice@x")))
    (m,) = RecordingMachines.made
    assert m.args["num_hosts"] == 2 and m.args["node_id"] == "n1"
    assert m.args["authorized_keys"] == ["tpujob:ssh-ed25519 AAAAuser tpujob",
                                         "alice:ssh-rsa AAAAalice alice@x"]
    assert m.args["ssh_port"] == server.info["ssh_port"]
    assert m.args["root"] == tmp_path / "emu" / "hosts" / "p" / ZONE / "n1"
    assert [h.ip for h in s.hosts] == [f"127.16.{m.args['ip_block']}.1",
                                       f"127.16.{m.args['ip_block']}.2"]
    assert cloud.host_keys("p", ZONE, "n1") == {0: ["ssh-ed25519 AAAAkey0"],
                                                1: ["ssh-ed25519 AAAAkey1"]}
    hosts = server.emulator.host_faults.hosts("n1")
    assert [h["root"] for h in hosts] == [str(m.args["root"] / "host-0"),
                                          str(m.args["root"] / "host-1")]


def test_live_nodes_get_distinct_ip_blocks(hosted):
    _, cloud = hosted
    cloud.create_node(request("a", "v4-8"))
    cloud.create_node(request("b", "v4-8"))
    assert len({m.args["ip_block"] for m in RecordingMachines.made}) == 2


def test_preempt_kill_host_and_delete_reach_the_machines(hosted):
    server, cloud = hosted
    cloud.create_node(request("n1"))
    (m,) = RecordingMachines.made
    server.emulator.host_faults.kill_host("n1", 1)
    assert ("kill_host", 1) in m.calls
    assert cloud.get_slice("p", ZONE, "n1").phase is SlicePhase.READY
    server.emulator.host_faults.preempt("n1")
    eventually(lambda: ("preempt", 0.5) in m.calls)
    assert cloud.get_slice("p", ZONE, "n1").phase is SlicePhase.PREEMPTED
    cloud.delete_slice("p", ZONE, "n1")
    assert m.calls[-1] == ("stop",)


def test_kill_host_out_of_range_and_unknown_node_are_refused(hosted):
    from tpujob.emulator.client import EmulatorClient
    from tpujob.errors import NotFoundError, UsageError

    server, cloud = hosted
    cloud.create_node(request("n1", "v4-8"))
    client = EmulatorClient(server.url)
    with pytest.raises(UsageError, match="has no host 3"):
        client.kill_host("n1", 3)
    with pytest.raises(NotFoundError, match="no node named ghost"):
        client.preempt("ghost")


def test_shutdown_stops_every_nodes_machines(tmp_path):
    RecordingMachines.made = []
    with EmulatorServer(tmp_path, provisioning_delay=0.0, storage=False,
                        machines_factory=RecordingMachines) as srv:
        from tpujob.cloud.tpu_api import GcpCloud

        GcpCloud.for_emulator(srv.url).create_node(request("n1", "v4-8"))
    assert RecordingMachines.made[0].calls[-1] == ("stop",)


def test_hosts_that_fail_to_start_fail_the_create(tmp_path):
    with EmulatorServer(tmp_path, provisioning_delay=0.0, storage=False,
                        machines_factory=BrokenMachines) as srv:
        from tpujob.cloud.tpu_api import GcpCloud

        cloud = GcpCloud.for_emulator(srv.url)
        with pytest.raises(CloudError, match="no namespaces here"):
            cloud.create_node(request("n1", "v4-8"))
        s = cloud.get_slice("p", ZONE, "n1")
        assert (s.phase, s.node_state) == (SlicePhase.FAILED, "UNKNOWN")
        assert "no namespaces here" in s.detail

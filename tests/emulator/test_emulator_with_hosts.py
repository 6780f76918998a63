"""The emulator with real hosts (machines.py): the cloud layer's view of them is the truth."""

from __future__ import annotations

import base64
import pathlib
import time

import paramiko
import pytest

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.emulator.server import EmulatorServer

ZONE = "us-central2-b"


@pytest.fixture
def hosted(tmp_path):
    from tpujob.cloud.gcp import GcpCloud
    from tpujob.emulator.machines import SliceMachines

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=SliceMachines, preempt_grace=0.5) as srv:
        yield srv, GcpCloud.for_emulator(srv.url, poll_interval=0.01)


def ssh(host, port: int, host_key: str, pkey) -> paramiko.SSHClient:
    kind, b64 = host_key.split()
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())  # only the published key
    client.get_host_keys().add(f"[{host.ip}]:{port}", kind,
                               paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
    client.connect(host.ip, port, username="tpujob", pkey=pkey, look_for_keys=False,
                   allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5)
    return client


@pytest.mark.slow
def test_every_host_answers_ssh_with_its_published_key_and_keeps_its_own_files(hosted, tmp_path):
    from tpujob.hosts.keys import load_key, ssh_keys_metadata

    server, cloud = hosted
    keys_home = tmp_path / "keys"
    req = SliceRequest(project="p", zone=ZONE, name="n1", accelerator_type="v4-16",
                       runtime_version="tpu-ubuntu2204-base",
                       ssh_keys=(ssh_keys_metadata(keys_home, "tpujob"),))
    s = cloud.create_node(req)
    host_keys = cloud.host_keys("p", ZONE, "n1")
    port = server.info["ssh_port"]
    for host in s.hosts:
        (key,) = host_keys[host.index]
        client = ssh(host, port, key, load_key(keys_home))
        _, out, _ = client.exec_command(f"echo host{host.index} > /mnt/mark", timeout=10)
        assert out.channel.recv_exit_status() == 0
        client.close()
    roots = [pathlib.Path(h["root"]) for h in server.emulator.hosts("n1")]
    assert [(r / "mnt" / "mark").read_text() for r in roots] == ["host0\n", "host1\n"]

    server.emulator.preempt("n1")
    assert cloud.get_slice("p", ZONE, "n1").phase is SlicePhase.PREEMPTED
    deadline = time.monotonic() + 10
    while True:  # SSH stops answering once the grace period is over
        try:
            ssh(s.hosts[0], port, host_keys[0][0], load_key(keys_home)).close()
        except (OSError, paramiko.SSHException):
            break
        assert time.monotonic() < deadline, "a preempted host still answers SSH"
        time.sleep(0.1)
    cloud.delete_slice("p", ZONE, "n1")
    assert not any(r.exists() for r in roots)

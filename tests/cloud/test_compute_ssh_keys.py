"""A lab node's key added to a live Compute Engine slice (ComputeTpuCloud.add_ssh_keys) against
the emulator with real hosts: instances.setMetadata on every VM of a lone TPU VM or of a MIG,
under the metadata's fingerprint."""

from __future__ import annotations

import paramiko
import pytest
from test_compute_mig_slices import until

from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import CloudError

PROJECT, ZONE = "tpujob-test", "us-east5-a"  # us-east5-a offers v6e (emulator/apis/compute/tpu_vm_rules.py)


@pytest.fixture
def hosted(tmp_path):
    from tpujob.cloud.compute_tpu import ComputeTpuCloud
    from tpujob.emulator.machines.slice import SliceMachines
    from tpujob.emulator.server import EmulatorServer

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=SliceMachines, preempt_grace=0.2) as srv:
        yield srv, ComputeTpuCloud.for_emulator(srv.url, retry_initial=0.01, retry_maximum=0.05,
                                                poll_interval=0.01)


def request(name: str, creator_line: str, accelerator: str, **fields) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator, api="compute",
                        runtime_version="", ssh_keys=(creator_line,), **fields)


def login(host, port: int, home) -> str:
    """`echo in` over SSH as tpujob with the key under `home` (the host key is not this test's
    subject: the hosts' own are checked in tests/emulator/test_emulator_with_hosts.py)."""
    from tpujob.hosts.keys import load_key

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(host.ip, port, username="tpujob", pkey=load_key(home), look_for_keys=False,
                   allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5)
    try:
        _, out, _ = client.exec_command("echo in", timeout=10)
        return out.read().decode()
    finally:
        client.close()


def items(server, vm: str) -> dict[str, str]:
    body = server.emulator.vms.get(PROJECT, ZONE, vm)
    return {i["key"]: i.get("value", "") for i in body["metadata"]["items"]}


@pytest.mark.slow
@pytest.mark.parametrize("name, accelerator, fields", [
    ("vm1", "v6e-8", {"provisioning": "spot"}),  # one TPU VM instance
    ("tpujob-000001-1", "v6e-16", {"provisioning": "reservation", "reservation": "res1"}),  # a MIG of 4
])
def test_a_joining_nodes_key_logs_in_on_every_vm_and_the_creators_still_does(hosted, tmp_path, name,
                                                                               accelerator, fields):
    from tpujob.hosts.keys import ssh_keys_metadata

    server, compute = hosted
    creator, joiner = tmp_path / "creator", tmp_path / "joiner"
    first = ssh_keys_metadata(creator, "tpujob")
    compute.request_node(request(name, first, accelerator, **fields))
    hosts = until(compute, name, SlicePhase.READY, 60).hosts
    vms = [name] if len(hosts) == 1 else sorted(m["name"] for m in server.emulator.vms.list(
        PROJECT, ZONE)["items"] if m["name"] != name)
    port = server.info["ssh_port"]
    for host in hosts:
        with pytest.raises(paramiko.AuthenticationException):
            login(host, port, joiner)
    before = {vm: items(server, vm) for vm in vms}
    line = ssh_keys_metadata(joiner, "tpujob")

    assert sorted(compute.add_ssh_keys(PROJECT, ZONE, [name], [line])) == vms
    assert compute.add_ssh_keys(PROJECT, ZONE, [name], [line]) == []  # nothing missing: no write
    for vm in vms:  # the line appended, every other item as it was
        assert items(server, vm) == {**before[vm], "ssh-keys": f"{first}\n{line}"}
    for host in hosts:
        assert login(host, port, joiner) == "in\n"
        assert login(host, port, creator) == "in\n"
    if len(vms) > 1:  # the template is left alone: it is what a recreated VM gets
        template = server.emulator.migs.get_template(PROJECT, name)["properties"]
        assert {i["key"]: i["value"] for i in template["metadata"]["items"]}["ssh-keys"] == first


@pytest.mark.slow
def test_one_mig_vms_new_key_lets_in_on_its_own_host_only(hosted, tmp_path):
    # setMetadata changes one instance: the guest agent of that VM alone reads it
    # (GoogleCloudPlatform/guest-agent), so the MIG's other hosts still refuse the key.
    from tpujob.hosts.keys import ssh_keys_metadata

    server, compute = hosted
    creator, joiner = tmp_path / "creator", tmp_path / "joiner"
    name = "tpujob-000002-1"
    compute.request_node(request(name, ssh_keys_metadata(creator, "tpujob"), "v6e-16",
                                 provisioning="reservation", reservation="res1"))
    hosts = until(compute, name, SlicePhase.READY, 60).hosts
    by_ip = {vm["networkInterfaces"][0]["networkIP"]: vm["name"]
             for vm in server.emulator.vms.list(PROJECT, ZONE)["items"]}
    one = hosts[1]
    assert compute._add_vm_keys(PROJECT, ZONE, by_ip[one.ip], [ssh_keys_metadata(joiner, "tpujob")], 30)
    port = server.info["ssh_port"]
    assert login(one, port, joiner) == "in\n"
    for host in hosts:
        if host is not one:
            with pytest.raises(paramiko.AuthenticationException):
                login(host, port, joiner)


def write_between_read_and_write(server, compute, monkeypatch, times: int) -> list[str]:
    """Another writer changes the VM's metadata right before each of tpujob's first `times`
    setMetadata calls, so the fingerprint tpujob read is stale; the fingerprints sent."""
    sent: list[str] = []
    real = compute._instances.set_metadata

    def racing(**kwargs):
        sent.append(kwargs["metadata_resource"].fingerprint)
        if len(sent) <= times:
            vms = server.emulator.vms
            now = vms.get(PROJECT, ZONE, kwargs["instance"])["metadata"]
            vms.set_metadata(PROJECT, ZONE, kwargs["instance"], {
                "fingerprint": now["fingerprint"],
                "items": [*now["items"], {"key": f"other-{len(sent)}", "value": "x"}]})
        return real(**kwargs)

    monkeypatch.setattr(compute._instances, "set_metadata", racing)
    return sent


def test_a_stale_fingerprint_is_read_again_and_written_once_more(server, monkeypatch):
    # Metadata.fingerprint (google-cloud-compute): a stale one fails "with error 412
    # conditionNotMet"; the other writer's item survives the retry.
    from tpujob.cloud.compute_tpu import ComputeTpuCloud

    compute = ComputeTpuCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)
    compute.create_node(request("vm2", "tpujob:ssh-ed25519 AAAA a", "v6e-8", provisioning="spot"))
    sent = write_between_read_and_write(server, compute, monkeypatch, times=1)
    assert compute.add_ssh_keys(PROJECT, ZONE, ["vm2"], ["tpujob:ssh-ed25519 BBBB b"]) == ["vm2"]
    assert len(sent) == 2 and sent[0] != sent[1]
    got = items(server, "vm2")
    assert got["ssh-keys"] == "tpujob:ssh-ed25519 AAAA a\ntpujob:ssh-ed25519 BBBB b"
    assert got["other-1"] == "x"


def test_a_fingerprint_stale_twice_is_a_cloud_error_and_the_key_is_not_written(server, monkeypatch):
    from tpujob.cloud.compute_tpu import ComputeTpuCloud

    compute = ComputeTpuCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)
    compute.create_node(request("vm3", "tpujob:ssh-ed25519 AAAA a", "v6e-8", provisioning="spot"))
    write_between_read_and_write(server, compute, monkeypatch, times=2)
    with pytest.raises(CloudError, match="412 conditionNotMet"):
        compute.add_ssh_keys(PROJECT, ZONE, ["vm3"], ["tpujob:ssh-ed25519 BBBB b"])
    assert items(server, "vm3")["ssh-keys"] == "tpujob:ssh-ed25519 AAAA a"

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
    from tpujob.cloud.tpu_api import GcpCloud
    from tpujob.emulator.machines.slice import SliceMachines

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
    roots = [pathlib.Path(h["root"]) for h in server.emulator.host_faults.hosts("n1")]
    assert [(r / "mnt" / "mark").read_text() for r in roots] == ["host0\n", "host1\n"]

    server.emulator.host_faults.preempt("n1")
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


def _host_client(server, cloud, tmp_path, name: str):
    from tpujob.hosts.keys import load_key, ssh_keys_metadata

    keys_home = tmp_path / "keys"
    req = SliceRequest(project="p", zone=ZONE, name=name, accelerator_type="v4-8",
                       runtime_version="tpu-ubuntu2204-base",
                       ssh_keys=(ssh_keys_metadata(keys_home, "tpujob"),))
    host = cloud.create_node(req).hosts[0]
    (key,) = cloud.host_keys("p", ZONE, name)[0]
    return ssh(host, server.info["ssh_port"], key, load_key(keys_home))


def _run(client, command: str) -> str:
    _, out, err = client.exec_command(command, timeout=20)
    assert out.channel.recv_exit_status() == 0, err.read().decode()
    return out.read().decode()


READ_PREEMPTED = """python3 - <<'EOF'
import os, urllib.error, urllib.request
url = "http://" + os.environ["GCE_METADATA_HOST"] + "/computeMetadata/v1/instance/preempted"
try:
    urllib.request.urlopen(url, timeout=5)
except urllib.error.HTTPError as e:
    print("without the header:", e.code)
request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
print("preempted:", urllib.request.urlopen(request, timeout=5).read().decode())
EOF"""

WATCH_PREEMPTED = """nohup python3 -c '
import os, signal, time, urllib.request
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the notice comes with SIGTERM: outlive it
url = "http://" + os.environ["GCE_METADATA_HOST"] + "/computeMetadata/v1/instance/preempted"
request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
urllib.request.urlopen(request, timeout=5).read()
open("/mnt/watching", "w").close()
while urllib.request.urlopen(request, timeout=5).read() != b"TRUE":
    time.sleep(0.1)
open("/mnt/seen", "w").write("TRUE at %f" % time.time())
' > /mnt/watch.log 2>&1 &"""


@pytest.mark.slow
def test_each_host_has_a_metadata_server_that_reads_preempted_from_the_notice(hosted, tmp_path):
    # The runtime's preemption poll reads the real key on the host's own loopback server,
    # named by GCE_METADATA_HOST as Google's libraries read it; TRUE once the notice comes,
    # while the program still runs in its grace.
    server, cloud = hosted
    client = _host_client(server, cloud, tmp_path, "md1")
    assert _run(client, READ_PREEMPTED).splitlines() == ["without the header: 403", "preempted: FALSE"]
    _run(client, WATCH_PREEMPTED)
    client.close()
    root = pathlib.Path(server.emulator.host_faults.hosts("md1")[0]["root"])
    deadline = time.monotonic() + 30
    while not (root / "mnt" / "watching").exists():  # its first read done: it polls
        assert time.monotonic() < deadline, (root / "mnt" / "watch.log").read_text()
        time.sleep(0.1)
    # The watcher exits on TRUE, which ends the host's shutdown; a grace past the test's own
    # timeout means it read TRUE from the notice on, not that it was killed at the grace's end.
    server.emulator.host_faults.preempt("md1", grace_seconds=3600)
    seen = (root / "mnt" / "seen").read_text() if (root / "mnt" / "seen").exists() else \
        (root / "mnt" / "watch.log").read_text()
    assert seen.startswith("TRUE at ")
    cloud.delete_slice("p", ZONE, "md1")


def _states(pids) -> list[str]:
    return [pathlib.Path(f"/proc/{p}/status").read_text().split("State:")[1].split()[0] for p in pids]


@pytest.mark.slow
def test_freeze_stops_the_program_only_and_thaw_continues_it(hosted, tmp_path):
    server, cloud = hosted
    client = _host_client(server, cloud, tmp_path, "fz1")
    program = int(_run(client, "TPUJOB_ATTEMPT=1 nohup sleep 600 > /dev/null 2>&1 & echo $!"))
    daemon = int(_run(client, "nohup sleep 601 > /dev/null 2>&1 & echo $!"))  # gcsfuse, say
    deadline = time.monotonic() + 10
    while b"TPUJOB_ATTEMPT=1" not in pathlib.Path(f"/proc/{program}/environ").read_bytes():  # exec'd
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert server.emulator.host_faults.freeze("fz1", 0) == 1
    deadline = time.monotonic() + 10  # a signal is delivered when the process is next scheduled
    while _states([program]) != ["T"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [s == "T" for s in _states([program, daemon])] == [True, False]  # stopped; not stopped
    assert _run(client, "echo still answering") == "still answering\n"  # SSH and new commands run
    assert server.emulator.host_faults.freeze("fz1", 0, thaw=True) == 1
    assert _states([program]) != ["T"]
    client.close()
    cloud.delete_slice("p", ZONE, "fz1")


@pytest.mark.slow
def test_each_host_has_a_dev_disk_of_its_own_never_the_machines(hosted, tmp_path):
    """Disks and apt's tools appear under /dev/disk; a host that saw the machine's would show
    them to every host of every emulator (and keep them after the node is gone)."""
    server, cloud = hosted
    pathlib.Path("/dev/disk").mkdir(exist_ok=True)  # as the first attach leaves it on a machine
    first = _host_client(server, cloud, tmp_path, "own1")
    second = _host_client(server, cloud, tmp_path, "own2")
    _run(first, "mkdir -p /dev/disk/by-id/google-own1-mark")
    assert "google-own1-mark" in _run(first, "ls /dev/disk/by-id")
    assert "google-own1-mark" not in _run(second, "ls -a /dev/disk/by-id 2>/dev/null || true")
    assert not pathlib.Path("/dev/disk/by-id/google-own1-mark").exists()
    first.close()
    second.close()
    for name in ("own1", "own2"):
        cloud.delete_slice("p", ZONE, name)


@pytest.mark.parametrize("which", ["internal", "external"])
def test_a_node_whose_host_addresses_another_process_holds_comes_up_on_other_ones(hosted, which):
    """Another process (another emulator on this machine, a host left running) listening on one
    of the addresses the node drew, internal or external, on the same SSH port: the node's hosts
    take other blocks, both of them, not UNKNOWN (a cold suite run saw three tries fail while
    only the internal block was drawn again)."""
    import socket

    from tpujob.emulator.addresses import external_ip, host_ip

    server, cloud = hosted
    plan = server.world.addresses
    draw, address, taken = {"internal": ("take_internal", host_ip, 4321),
                            "external": ("take_external", external_ip, 77)}[which]
    drawn, real = iter([taken]), getattr(plan, draw)
    setattr(plan, draw, lambda *a, **k: next(drawn, None) or real(*a, **k))
    with socket.socket() as squatter:
        squatter.bind((address(taken, 0), server.info["ssh_port"]))
        squatter.listen()
        s = cloud.create_node(SliceRequest(project="p", zone=ZONE, name="n2", accelerator_type="v4-8",
                                           runtime_version="tpu-ubuntu2204-base"))
    assert s.phase == SlicePhase.READY
    assert address(taken, 0) not in (s.hosts[0].ip, s.hosts[0].external_ip)
    assert s.hosts[0].external_ip is not None


def test_the_hosts_ssh_port_is_never_handed_to_another_program_by_chance(hosted):
    """A program listening on every address on a port the kernel picked (JAX's coordinator binds
    [::]:PORT by default) refuses that port on every host address, whichever block a node draws.
    The hosts' port lies below the ephemeral range, where the kernel hands out nothing: nodes
    come up beside such listeners."""
    import socket

    from tpujob.emulator.server import SSH_PORTS_FROM, ephemeral_ports_from

    server, cloud = hosted
    assert SSH_PORTS_FROM <= server.info["ssh_port"] < ephemeral_ports_from()
    listeners = []
    try:
        for _ in range(20):
            listener = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
            listeners.append(listener)
            assert listener.getsockname()[1] != server.info["ssh_port"]
        s = cloud.create_node(SliceRequest(project="p", zone=ZONE, name="beside", accelerator_type="v4-16",
                                           runtime_version="tpu-ubuntu2204-base"))
        assert s.phase == SlicePhase.READY and len(s.hosts) == 2
    finally:
        for listener in listeners:
            listener.close()


def test_with_no_room_below_the_ephemeral_range_the_port_is_a_free_one(monkeypatch):
    import socket

    from tpujob.emulator import server

    monkeypatch.setattr(server, "ephemeral_ports_from", lambda: server.SSH_PORTS_FROM)
    port = server.ssh_port_for()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: raises otherwise


def test_a_node_deleted_while_its_hosts_start_leaves_no_host_behind(tmp_path):
    """A delete that lands while the node's hosts are still starting (a create, then a cancel at
    once) finds no machines on the node to stop: the start stops them. Left running, they kept
    their addresses on the SSH port for the emulator's life, and a later node that drew them
    failed to start."""
    import socket
    import threading

    from tpujob.cloud.tpu_api import GcpCloud
    from tpujob.emulator.machines.slice import SliceMachines

    entered, release, drawn = threading.Event(), threading.Event(), []

    class SlowToStart(SliceMachines):
        def start(self):
            drawn.extend(h.ip for h in self._hosts)
            entered.set()
            release.wait(30)
            return super().start()

    with EmulatorServer(tmp_path / "emu", provisioning_delay=0.0, storage=False,
                        machines_factory=SlowToStart) as srv:
        cloud = GcpCloud.for_emulator(srv.url, poll_interval=0.01)
        request = SliceRequest(project="p", zone=ZONE, name="brief", accelerator_type="v4-16",
                               runtime_version="tpu-ubuntu2204-base")
        created = threading.Thread(target=lambda: _create_quietly(cloud, request))
        created.start()
        assert entered.wait(30)
        cloud.delete_slice("p", ZONE, "brief")
        release.set()
        created.join(30)
        deadline = time.monotonic() + 10
        while True:
            try:
                for ip in drawn:
                    with socket.socket() as probe:
                        probe.bind((ip, srv.info["ssh_port"]))  # free: nothing listens there
                break
            except OSError:
                assert time.monotonic() < deadline, f"a deleted node's host still holds {ip}"
                time.sleep(0.1)


def _create_quietly(cloud, request) -> None:
    try:
        cloud.create_node(request)
    except Exception:  # the create's operation ends aborted: the node was deleted meanwhile
        pass


def test_nodes_of_one_name_in_two_projects_keep_their_own_hosts(hosted):
    """Node names are unique within a project's zone only (every job 1 makes tpujob-000001-1):
    two such nodes at once have hosts of their own, and deleting one (its machines remove their
    directory) leaves the other's files where they were."""
    server, cloud = hosted
    nodes = {}
    for project in ("p1", "p2"):
        cloud.create_node(SliceRequest(project=project, zone=ZONE, name="same", accelerator_type="v4-8",
                                       runtime_version="tpu-ubuntu2204-base"))
        nodes[project] = server.emulator.tpu.find_node(f"projects/{project}/locations/{ZONE}/nodes/same")
    kept = nodes["p2"].machines.host_root(0) / "mnt" / "kept"
    assert kept.parent != nodes["p1"].machines.host_root(0) / "mnt"
    kept.write_text("p2's")
    cloud.delete_slice("p1", ZONE, "same")
    assert kept.read_text() == "p2's"


def test_a_key_added_to_a_live_nodes_metadata_logs_in_and_the_others_stay(hosted, tmp_path):
    # A lab's node joining after the slice was made adds its own line (GcpCloud.add_ssh_keys:
    # UpdateNode, mask `metadata`): the READY node's hosts let it in, as Google's guest agent
    # does, and the creator's key still works; adding it again changes nothing.
    from tpujob.hosts.keys import load_key, ssh_keys_metadata

    server, cloud = hosted
    creator, joiner = tmp_path / "creator", tmp_path / "joiner"
    s = cloud.create_node(SliceRequest(project="p", zone=ZONE, name="lab1", accelerator_type="v4-8",
                                       runtime_version="tpu-ubuntu2204-base",
                                       ssh_keys=(ssh_keys_metadata(creator, "tpujob"),)))
    (key,) = cloud.host_keys("p", ZONE, "lab1")[0]
    port = server.info["ssh_port"]
    with pytest.raises(paramiko.AuthenticationException):
        ssh(s.hosts[0], port, key, load_key(joiner))
    line = ssh_keys_metadata(joiner, "tpujob")
    assert cloud.add_ssh_keys("p", ZONE, ["lab1"], [line]) == ["lab1"]
    assert cloud.add_ssh_keys("p", ZONE, ["lab1"], [line]) == []
    assert cloud.get_node("p", ZONE, "lab1").metadata["ssh-keys"].splitlines() == [
        ssh_keys_metadata(creator, "tpujob"), line]
    for home in (joiner, creator):
        client = ssh(s.hosts[0], port, key, load_key(home))
        assert _run(client, "echo in") == "in\n"
        client.close()

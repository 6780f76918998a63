"""Stopping the emulator, or killing it, ends every host it started and every program on them,
whatever their number: nothing of it is left on the machine (issue 45, item 9).

An emulated host is found from outside as the processes of a mount namespace whose mounts name
the emulator's directory (its hosts' own /mnt, /home, /root and /tmp lie there): what a user
would find with `ps` after a benchmark, however the emulator tracks them."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request

import paramiko
import pytest

from tpujob.emulator import process
from tpujob.emulator.machines.reaper import start_time

ZONE = "us-central2-b"
# Detached from the SSH session, and deaf to SIGTERM (an ignored signal stays ignored across
# exec): a program that a polite shutdown does not end.
STUBBORN = "trap '' TERM; setsid bash -c \"trap '' TERM; exec sleep 3600\" </dev/null >/dev/null 2>&1 &"


def processes_of(directory: str) -> dict[int, bytes]:
    """pid -> command line of each process in a mount namespace whose mounts name `directory`."""
    mine = os.stat("/proc/self/ns/mnt").st_ino
    namespaces: dict[int, bool] = {}
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/mnt").st_ino
            if ns == mine:
                continue
            if ns not in namespaces:
                with open(f"/proc/{entry.name}/mountinfo") as f:
                    namespaces[ns] = directory in f.read()
            if namespaces[ns]:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    found[int(entry.name)] = f.read().replace(b"\0", b" ")
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


def wait_for(check, what: str, patience: float = 120.0):
    """Poll `check` until it answers something true; the deadline only bounds a hang."""
    deadline = time.monotonic() + patience
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.1)


def api(url: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(f"{url}{path}", method=method, headers={"Content-Type": "application/json"},
                                     data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"{}")


@pytest.fixture
def emulator(tmp_path, monkeypatch):
    """A background emulator of this test's own, as `tpujob emulator start` makes it."""
    monkeypatch.setenv("TPUJOB_EMULATOR_DIR", str(tmp_path / "emulator"))
    info = process.start(provisioning_delay=0.0)
    yield info
    process.stop()


def start_nodes(info: dict, count: int, keys_home) -> list[str]:
    """`count` one-host nodes, READY; their names."""
    from tpujob.hosts.keys import ssh_keys_metadata

    parent = f"/v2/projects/p/locations/{ZONE}"
    body = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base",
            "metadata": {"ssh-keys": ssh_keys_metadata(keys_home, "tpujob")}}
    names = [f"n{i}" for i in range(count)]
    for name in names:
        api(info["tpu_endpoint"], "POST", f"{parent}/nodes?nodeId={name}", body)

    def listed() -> list[dict]:
        return api(info["tpu_endpoint"], "GET", f"{parent}/nodes").get("nodes", [])

    def all_ready():
        nodes = listed()
        return len(nodes) == count and all(n["state"] == "READY" for n in nodes)

    def why() -> str:  # the nodes not READY, and what they say
        nodes = listed()
        return f"{len(nodes)} of {count} nodes listed; not READY: " + "; ".join(
            f"{n['name'].rsplit('/', 1)[-1]} {n['state']} {n.get('healthDescription', '')}"
            for n in nodes if n["state"] != "READY")[:2000]

    wait_for(all_ready, why, patience=240)
    return names


def run_stubborn_programs(info: dict, nodes: list[str], keys_home) -> None:
    from tpujob.hosts.keys import load_key

    client = process.client()
    for node in nodes:
        (host,) = client.hosts(node)
        kind, b64 = host["hostKey"].split()[:2]
        ssh = paramiko.SSHClient()
        ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
        ssh.get_host_keys().add(f"[{host['ip']}]:{host['sshPort']}", kind,
                                paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
        ssh.connect(host["ip"], host["sshPort"], username="tpujob", pkey=load_key(keys_home),
                    look_for_keys=False, allow_agent=False, timeout=30, banner_timeout=30, auth_timeout=30)
        _, out, _ = ssh.exec_command(STUBBORN, timeout=30)
        assert out.channel.recv_exit_status() == 0
        ssh.close()


def still_running(found: dict[int, bytes], started: dict[int, str | None]) -> list[int]:
    """Those of `found` still running (a zombie is not; a pid given to a new process neither)."""
    return [pid for pid in found if start_time(pid) is not None and start_time(pid) == started[pid]]


def stubborn(found: dict[int, bytes]) -> list[int]:
    return [pid for pid, cmd in found.items() if cmd.startswith(b"sleep 3600")]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stop_ends_every_host_and_program_of_a_few_hundred_nodes(emulator, tmp_path):
    nodes = start_nodes(emulator, 200, tmp_path / "keys")
    run_stubborn_programs(emulator, nodes[::20], tmp_path / "keys")
    directory = str(tmp_path / "emulator")
    found = wait_for(lambda: (f := processes_of(directory)) and len(stubborn(f)) == 10 and f,
                     "the programs running")
    assert sum(cmd.startswith(b"sleep infinity") for cmd in found.values()) == 200  # the hosts' holders
    started = {pid: start_time(pid) for pid in found}

    assert process.stop()  # `tpujob emulator stop`: SIGTERM, SIGKILL after its grace

    assert processes_of(directory) == {}
    assert still_running(found, started) == []


@pytest.mark.slow
def test_a_killed_emulator_leaves_no_host_running(emulator, tmp_path):
    nodes = start_nodes(emulator, 3, tmp_path / "keys")
    run_stubborn_programs(emulator, nodes, tmp_path / "keys")
    directory = str(tmp_path / "emulator")
    found = wait_for(lambda: (f := processes_of(directory)) and len(stubborn(f)) == 3 and f,
                     "the programs running")

    started = {pid: start_time(pid) for pid in found}
    os.kill(emulator["pid"], signal.SIGKILL)  # nothing of the emulator runs to end its hosts

    wait_for(lambda: processes_of(directory) == {}, "the hosts ended after the emulator was killed")
    assert still_running(found, started) == []


def test_stop_waits_for_the_hosts_of_an_emulator_killed_at_its_grace(emulator, tmp_path):
    start_nodes(emulator, 2, tmp_path / "keys")
    directory = str(tmp_path / "emulator")
    wait_for(lambda: len(processes_of(directory)) == 2, "the hosts' holders running")

    assert process.stop(grace=0)  # SIGKILL at once: the close never runs

    assert processes_of(directory) == {}

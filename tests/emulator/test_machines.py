"""Emulated TPU hosts: own filesystem view, SSH with key checks, processes that die when told."""

from __future__ import annotations

import base64
import io
import os
import random
import shlex
import sys
import threading
import time

import paramiko
import pytest

import tpujob
from tpujob.emulator.addresses import host_ip
from tpujob.emulator.machines.reaper import start_time
from tpujob.emulator.machines.slice import SliceMachines, kept_paths
from tpujob.hosts.keys import load_key, public_key_line

PORT = 2222


@pytest.fixture
def client_key(tmp_path):
    return load_key(tmp_path / "client"), public_key_line(tmp_path / "client")


@pytest.fixture
def make_machines(tmp_path, client_key):
    started = []

    def make(num_hosts: int, keys: list[str] | None = None, **options) -> tuple[SliceMachines, list]:
        # A random block keeps parallel test workers on distinct addresses.
        block = random.randint(1000, 59000)
        m = SliceMachines(tmp_path / f"node-{block}", f"node-{block}", num_hosts,
                          keys if keys is not None else [client_key[1]], block, PORT, **options)
        started.append(m)
        return m, m.start()

    yield make
    for m in started:
        m.stop()


def test_host_addresses_follow_the_contract():
    assert host_ip(7, 0) == "127.16.7.1"
    assert host_ip(253, 3) == "127.17.3.4"


def connect(ep, pkey, host_key: str | None = None, user: str = "tpujob") -> paramiko.SSHClient:
    kind, b64 = (host_key or ep.host_key).split()[:2]
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.get_host_keys().add(f"[{ep.ip}]:{ep.ssh_port}", kind,
                               paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
    client.connect(ep.ip, ep.ssh_port, username=user, pkey=pkey, look_for_keys=False,
                   allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5)
    return client


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, out, err = client.exec_command(command, timeout=10)
    text = out.read().decode() + err.read().decode()
    return out.channel.recv_exit_status(), text


def test_each_host_has_its_own_mnt_home_and_tmp(make_machines, client_key):
    m, eps = make_machines(2)
    assert eps[1].ip == eps[0].ip[:-1] + "2" and eps[0].ip.startswith("127.")
    c0, c1 = connect(eps[0], client_key[0]), connect(eps[1], client_key[0])
    assert run(c0, "echo zero > /mnt/f; echo home > ~/h; echo t > /tmp/t; pwd") == (0, "/home/tpujob\n")
    code, out = run(c1, "ls /mnt /tmp ~")
    assert code == 0 and "f" not in out.split() and "h" not in out.split() and "t" not in out.split()
    assert (m.host_root(0) / "mnt" / "f").read_text() == "zero\n"
    assert (m.host_root(0) / "home" / "tpujob" / "h").read_text() == "home\n"
    assert (m.host_root(0) / "tmp" / "t").exists()
    assert not (m.host_root(1) / "mnt" / "f").exists()
    assert run(c1, "echo out; echo err >&2; exit 7") == (7, "out\nerr\n")


def test_hosts_see_the_interpreter_and_tpujob_wherever_they_live(make_machines, client_key):
    # A checkout or venv under /tmp, /home or /root (CI clones, pyenv) stays reachable on every
    # host although those directories are the host's own.
    m, eps = make_machines(1)
    c0 = connect(eps[0], client_key[0])
    code, out = run(c0, f"{shlex.quote(sys.executable)} -c 'import tpujob; print(tpujob.__file__)'")
    assert code == 0, out
    assert out.strip() == tpujob.__file__
    assert kept_paths() == sorted(kept_paths())
    marker = f"tpujob-test-{os.getpid()}"
    assert run(c0, f"touch /root/{marker} /tmp/{marker}")[0] == 0
    assert not os.path.exists(f"/root/{marker}") and not os.path.exists(f"/tmp/{marker}")
    assert (m.host_root(0) / "root" / marker).exists()


def test_the_images_environment_reaches_every_session_on_every_host(make_machines, client_key):
    _, eps = make_machines(2, image_env={"JAX_COMPILATION_CACHE_DIR": "/var/tmp/cache", "GCE_METADATA_HOST": "x"})
    for ep in eps:  # the host's own metadata server wins over the image's word
        code, out = run(connect(ep, client_key[0]), 'echo "$JAX_COMPILATION_CACHE_DIR $GCE_METADATA_HOST"')
        assert code == 0 and out.split()[0] == "/var/tmp/cache" and out.split()[1].startswith(ep.ip + ":"), out


def test_sftp_uploads_land_on_that_host(make_machines, client_key):
    m, eps = make_machines(1)
    sftp = connect(eps[0], client_key[0]).open_sftp()
    sftp.putfo(io.BytesIO(b"payload"), "code.tar")
    sftp.putfo(io.BytesIO(b"m"), "/mnt/m")
    assert (m.host_root(0) / "home" / "tpujob" / "code.tar").read_bytes() == b"payload"
    assert (m.host_root(0) / "mnt" / "m").read_bytes() == b"m"
    assert sorted(sftp.listdir("/mnt")) == ["m"]


def test_only_the_authorized_key_gets_in(make_machines, client_key, tmp_path):
    _, eps = make_machines(1)
    stranger = load_key(tmp_path / "stranger")
    with pytest.raises(paramiko.AuthenticationException):
        connect(eps[0], stranger)


def test_user_prefixed_keys_bind_the_user(make_machines, client_key):
    _, eps = make_machines(1, keys=[f"alice:{client_key[1]}"])
    assert run(connect(eps[0], client_key[0], user="alice"), "echo $HOME")[1] == "/home/alice\n"
    with pytest.raises(paramiko.AuthenticationException):
        connect(eps[0], client_key[0], user="bob")


def test_client_verifying_another_host_key_is_refused(make_machines, client_key):
    _, eps = make_machines(2)
    with pytest.raises(paramiko.BadHostKeyException):
        connect(eps[0], client_key[0], host_key=eps[1].host_key)


def test_detached_program_survives_the_session_and_preempt_kills_it(make_machines, client_key):
    m, eps = make_machines(2)
    for ep in eps:
        c = connect(ep, client_key[0])
        run(c, "setsid bash -c 'trap \"echo term > /mnt/got-term; exit 0\" TERM; touch /mnt/trapped; "
               "while :; do sleep 0.05; done' > /dev/null 2>&1 < /dev/null & echo $! > /mnt/pid")
        c.close()
    for i in range(2):  # each trap set: a SIGTERM from here on is the program's to answer
        wait_for_file(m.host_root(i) / "mnt" / "trapped")
    pid = int((m.host_root(0) / "mnt" / "pid").read_text())
    assert pid in m.host_pids(0)
    m.preempt(grace_seconds=3)
    assert m.host_pids(0) == [] and m.host_pids(1) == []
    assert (m.host_root(0) / "mnt" / "got-term").read_text() == "term\n"   # SIGTERM came first
    with pytest.raises((OSError, paramiko.SSHException)):
        connect(eps[0], client_key[0])


def test_preempt_kills_after_the_grace_period(make_machines, client_key):
    m, eps = make_machines(1)
    run(connect(eps[0], client_key[0]),
        "setsid bash -c 'trap \"\" TERM; touch /tmp/trapped; while :; do sleep 0.05; done' "
        ">/dev/null 2>&1 </dev/null &")
    wait_for_file(m.host_root(0) / "tmp" / "trapped")  # SIGTERM before the trap would end it at once
    start = time.monotonic()
    m.preempt(grace_seconds=0.5)
    # Killed after the grace, not before (a lower bound: load cannot make it fail); killed at
    # all, though it ignores SIGTERM and never exits, or preempt would not have returned.
    assert time.monotonic() - start > 0.4
    assert m.host_pids(0) == []


def test_a_host_left_with_only_its_mounts_is_off_before_the_grace_ends(make_machines, client_key):
    # The program saved and exited on SIGTERM; gcsfuse, which ignores SIGTERM so that the save
    # reaches the bucket, is all that is left: the guest's shutdown is over, and the VM is off
    # then, not at the end of Google's 30 s (G2 soft off to G3 mechanical off).
    m, eps = make_machines(1)
    run(connect(eps[0], client_key[0]),
        "setsid bash -c 'trap \"\" TERM; touch /tmp/trapped; exec -a \"python3 -m tpujob.emulator.machines.gcsfuse\" "
        "sleep 3600' >/dev/null 2>&1 </dev/null &")
    wait_for_file(m.host_root(0) / "tmp" / "trapped")
    # A grace far past the test's own timeout: a preempt that waited for it would fail the test;
    # the join only bounds a hang.
    preempting = threading.Thread(target=m.preempt, kwargs={"grace_seconds": 3600}, daemon=True)
    preempting.start()
    preempting.join(240)
    assert not preempting.is_alive(), "the preemption waited for the grace"
    assert m.host_pids(0) == []


def test_a_preempted_hosts_namespace_stays_pinned_until_its_programs_are_gone(make_machines, client_key):
    # The namespace holder outlives every other process of the host: a mount namespace whose
    # last process exits is freed and its id may go to the next one made (another emulator's
    # host, a preflight's `unshare`), which a scan by that id during the grace would then kill
    # (seen: "namespace set-up failed" and `unshare true` exiting -9 beside a preemption).
    m, eps = make_machines(1)
    # The program notes the SIGTERM and goes on until the test lets it go (/tmp/go): the test
    # looks inside the grace by that event, not by a sleep shorter than the grace.
    run(connect(eps[0], client_key[0]),
        "setsid bash -c 'trap \"touch /tmp/termed\" TERM; touch /tmp/trapped; "
        "until [ -e /tmp/go ]; do sleep 0.05; done' >/dev/null 2>&1 </dev/null &")
    wait_for_file(m.host_root(0) / "tmp" / "trapped")
    holder = m._hosts[0].holder
    preempting = threading.Thread(target=m.preempt, kwargs={"grace_seconds": 3600}, daemon=True)
    preempting.start()
    wait_for_file(m.host_root(0) / "tmp" / "termed")  # the SIGTERM was sent to the namespace
    assert holder.poll() is None, "the holder died with SIGTERM: its namespace id is free to reuse"
    assert len(m.host_pids(0)) >= 2  # the holder and the program
    (m.host_root(0) / "tmp" / "go").touch()
    preempting.join(240)  # bounds a hang only
    assert holder.poll() is not None and m.host_pids(0) == []


def wait_for_file(path, patience: float = 120.0) -> None:
    """Until `path` exists; the deadline only bounds a hang."""
    deadline = time.monotonic() + patience
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_kill_host_takes_one_host_down_at_once(make_machines, client_key):
    m, eps = make_machines(2)
    for ep in eps:
        run(connect(ep, client_key[0]), "setsid sleep 60 >/dev/null 2>&1 </dev/null &")
    m.kill_host(1)
    assert m.host_pids(1) == []
    assert m.host_pids(0)   # its namespace holder and the sleep
    with pytest.raises((OSError, paramiko.SSHException)):
        connect(eps[1], client_key[0])
    assert run(connect(eps[0], client_key[0]), "echo up") == (0, "up\n")


def test_stop_leaves_no_process_and_no_directory(tmp_path, client_key):
    m = SliceMachines(tmp_path / "n", "n", 3, [client_key[1]], random.randint(1000, 59000), PORT)
    eps = m.start()
    run(connect(eps[2], client_key[0]), "setsid sleep 60 >/dev/null 2>&1 </dev/null &")
    started = {pid: start_time(pid) for pid in m.host_pids(2)}
    m.stop()
    assert not (tmp_path / "n").exists()
    # Gone: their pids may belong to other processes by now (a suite forks thousands a minute),
    # so none may have both a pid and the start time it had.
    assert [pid for pid, when in started.items() if start_time(pid) == when] == []


def test_ip_blocks_beyond_the_address_range_are_refused(tmp_path):
    assert host_ip(59999, 0) == "127.255.249.1"
    with pytest.raises(ValueError, match="ip_block"):
        SliceMachines(tmp_path, "n", 1, [], 60000, PORT)

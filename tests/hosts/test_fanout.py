"""Fan-out over SSH: parallel, logged, verified host keys, timeouts, retries, fail-fast."""

from __future__ import annotations

import dataclasses
import os
import stat

import pytest

from tpujob.errors import CloudError, LocalIOError
from tpujob.hosts.fanout import Host, HostGroup, ensure_ok
from tpujob.hosts.keys import key_path, load_key, public_key_line, ssh_keys_metadata


def test_key_is_private_and_stable(tpujob_home):
    line = public_key_line(tpujob_home)
    assert line.startswith("ssh-ed25519 ") and line.endswith(" tpujob")
    assert stat.S_IMODE(os.stat(key_path(tpujob_home)).st_mode) == 0o600
    assert public_key_line(tpujob_home) == line
    assert ssh_keys_metadata(tpujob_home, "alice") == f"alice:{line}"
    assert load_key(tpujob_home).get_base64() == line.split()[1]


def test_runs_on_every_host_with_per_host_logs(slice_hosts, tmp_path):
    machines, group = slice_hosts(4)
    seen = []
    results = group.run(lambda h: f"echo host-{h.index} > /mnt/who; cat /mnt/who; echo e >&2",
                        log_paths=lambda h: tmp_path / "logs" / f"host-{h.index}.log",
                        progress=seen.append)
    assert [r.exit_code for r in results] == [0, 0, 0, 0]
    for i in range(4):
        # stdout and stderr are two SSH streams: both land in the log, in arrival order.
        assert sorted((tmp_path / "logs" / f"host-{i}.log").read_text().splitlines()) == ["e", f"host-{i}"]
        assert (machines.host_root(i) / "mnt" / "who").read_text() == f"host-{i}\n"
    assert [p.done for p in seen] == [1, 2, 3, 4] and seen[-1].pending == ()
    assert seen[-1].total == 4 and seen[-1].failed == 0
    ensure_ok(results, "echo")


def test_a_full_local_disk_is_no_lost_connection(slice_hosts, tmp_path):
    """Issue 45: the host log written inside the SSH error handling made ENOSPC read as
    "connection lost", and the slice was replaced. /dev/full answers every write with ENOSPC."""
    machines, group = slice_hosts(2)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "host-1.log").symlink_to("/dev/full")
    with pytest.raises(LocalIOError, match=r"^disk full: cannot write the host log .*host-1\.log \(free space"):
        group.run(lambda h: f"echo ran > /mnt/ran; echo out-{h.index}",
                  log_paths=lambda h: logs / f"host-{h.index}.log")
    # The command ran to its end on every host: a local fault never cuts a host's step short.
    assert all((machines.host_root(i) / "mnt" / "ran").read_text() == "ran\n" for i in range(2))
    assert (logs / "host-0.log").read_text() == "out-0\n"


def test_an_unwritable_log_dir_stops_the_step_before_any_host(slice_hosts, tmp_path):
    """A log dir tpujob may not write (root-owned logs/JOB; here a file where the dir should be)
    is this machine's fault: said as such, before any host runs the command."""
    machines, group = slice_hosts(1)
    (tmp_path / "logs").write_text("not a directory")
    with pytest.raises(LocalIOError, match=r"^cannot open the host log .*host-0\.log: .*not on the hosts"):
        group.run("echo ran > /mnt/ran", log_paths=lambda h: tmp_path / "logs" / "JOB" / f"host-{h.index}.log")
    assert not (machines.host_root(0) / "mnt" / "ran").exists()


def test_failures_are_reported_per_host(slice_hosts):
    _, group = slice_hosts(2)
    results = group.run(lambda h: f"exit {h.index * 3}")
    assert [r.exit_code for r in results] == [0, 3]
    with pytest.raises(CloudError, match="boom failed on 1 of 2 hosts: host 1: exit code 3"):
        ensure_ok(results, "boom")


def test_fail_fast_cancels_the_slow_hosts(slice_hosts):
    _, group = slice_hosts(3)
    # Past the test's own timeout: slow hosts left to run would fail it, not a clock bound.
    results = group.run(lambda h: "exit 1" if h.index == 0 else "sleep 600", fail_fast=True,
                        timeout=600)
    assert results[0].exit_code == 1
    assert all("cancelled" in r.error for r in results[1:])


def test_per_host_timeout(slice_hosts):
    _, group = slice_hosts(1)
    (result,) = group.run("sleep 10", timeout=0.5)
    assert result.error == "timed out after 0.5s" and not result.ok


def test_wrong_host_key_is_a_clear_error(slice_hosts):
    _, group = slice_hosts(2)
    wrong = [dataclasses.replace(group.hosts[0], host_keys=group.hosts[1].host_keys)]
    (result,) = HostGroup(wrong, "tpujob", group.pkey).run("true")
    assert "host 0" in result.error and "host key mismatch" in result.error


def test_no_known_host_key_is_refused(slice_hosts):
    _, group = slice_hosts(1)
    bare = [dataclasses.replace(group.hosts[0], host_keys=())]
    (result,) = HostGroup(bare, "tpujob", group.pkey).run("true")
    assert "no host key known" in result.error


def test_unreachable_host_is_retried_then_reported(tpujob_key):
    host = Host(0, "127.250.0.1", 2222,
                ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIg0GkXnEQEEnuwqk1S8Zdw/ZYy2+bhTIzrxfphS1cp2",))
    (result,) = HostGroup([host], "tpujob", tpujob_key[0], retries=1).run("true")
    assert "cannot connect after 2 tries" in result.error


def test_a_killed_host_fails_alone_and_the_connection_is_reused(slice_hosts):
    machines, group = slice_hosts(2)
    assert all(r.ok for r in group.run("true"))
    transport = group.client(group.hosts[0]).get_transport()
    machines.kill_host(1)
    results = group.run("echo still")
    assert results[0].output == "still\n" and not results[1].ok
    assert group.client(group.hosts[0]).get_transport() is transport

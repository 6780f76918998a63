"""setup / launch / stop / status on emulated hosts, and quoting of everything substituted."""

from __future__ import annotations

import json
import os
import time

import pytest

from tpujob.errors import UsageError
from tpujob.hosts import program
from tpujob.hosts.program import HostAttempt
from tpujob.hosts.scripts import as_command, env_payload, render

NASTY = "it's \"quoted\" $(touch /mnt/pwned) `touch /mnt/pwned2`; touch /mnt/pwned3\nline2 $HOME"


def attempt(**kw) -> HostAttempt:
    base = dict(job_id="job-1", attempt=1, coordinator="127.0.0.1:8476", run_dir="/mnt/run",
                workdir="code")
    return HostAttempt(**{**base, **kw})


def wait_state(group, att, state: str, seconds: float = 120) -> list:
    """The hosts' statuses once all are in `state`; the deadline only bounds a hang."""
    deadline = time.monotonic() + seconds
    while True:
        statuses = program.status(group, att)
        if all(s.state == state for s in statuses) or time.monotonic() > deadline:
            return statuses
        time.sleep(0.05)


def test_render_quotes_and_checks_values():
    text = render("status.sh", job_dir="a'b", attempt=3, run_dir="/r $(x)", tail_bytes=1, ledger_keys="a b")
    assert "job_dir='a'\"'\"'b'\nattempt=3\nrun_dir='/r $(x)'\n" in text
    with pytest.raises(ValueError, match="missing"):
        render("status.sh", job_dir="x")
    with pytest.raises(ValueError, match="unused"):
        render("status.sh", job_dir="x", attempt=1, run_dir="r", tail_bytes=1, ledger_keys="", extra=2)


def test_env_payload_refuses_bad_names():
    assert env_payload({"A": "1", "B": "x\ny"}) == b"A=1\0B=x\ny\0"
    with pytest.raises(UsageError):
        env_payload({"A;rm": "1"})


def test_env_payload_refuses_what_a_host_cannot_export():
    """A secret's value is known only at setup: one past Linux's MAX_ARG_STRLEN would be
    exported on every host and fail there; it is refused before any host is asked."""
    env_payload({"TOKEN": "t" * (131_071 - len("TOKEN="))})
    with pytest.raises(UsageError, match="TOKEN is 131072 bytes with its name; a host takes at most 131071"):
        env_payload({"TOKEN": "t" * (131_072 - len("TOKEN="))})
    with pytest.raises(UsageError, match="the environment is 1200040 bytes in all"):
        env_payload({f"V{i}": "v" * 120_000 for i in range(10)})


def test_a_script_travels_on_stdin_whatever_its_size():
    shipped = as_command("echo '" + "x" * 200_000 + "'", "tpujob-test")
    assert len(shipped.command) < 120 and shipped.preamble.endswith(b"'\0")
    with pytest.raises(UsageError, match="NUL"):
        render("status.sh", job_dir="a\0b", attempt=3, run_dir="/r", tail_bytes=1, ledger_keys="")


def test_program_runs_detached_with_the_contract_env_and_exits(slice_hosts, tmp_path):
    machines, group = slice_hosts(2)
    att = attempt(env={"GREETING": "hi"}, secrets={"TOKEN": "s3cret"})
    logs = lambda h: tmp_path / f"host-{h.index}.log"  # noqa: E731
    setup = program.setup(group, att, "echo setup-ran >> /mnt/setup", log_paths=logs)
    assert all(r.ok for r in setup)
    assert all(r.ok for r in program.setup(group, att, "echo setup-ran >> /mnt/setup"))
    # The program waits for the test's word (a file), not a sleep, so the launch sees it started.
    cmd = ("until [ -e /mnt/go ]; do sleep 0.05; done; "
           "env | grep -E '^(TPUJOB_|GREETING|TOKEN)' | grep -v ^TPUJOB_EMULATED_TPU= | sort > ~/env.txt; "
           "pwd > ~/pwd.txt; exit 4")
    launched = program.launch(group, att, cmd, log_paths=logs)
    assert all(r.ok and '"state": "started"' in r.output for r in launched)
    group.close()   # the program must outlive the SSH sessions
    for i in range(2):
        (machines.host_root(i) / "mnt" / "go").touch()
    statuses = wait_state(group, att, "exited")
    assert [(s.state, s.exit_code) for s in statuses] == [("exited", 4)] * 2
    for i in range(2):
        root = machines.host_root(i)
        assert (root / "mnt" / "setup").read_text() == "setup-ran\n"   # once per attempt
        env = (root / "home" / "tpujob" / "env.txt").read_text().splitlines()
        assert env == ["GREETING=hi", "TOKEN=s3cret", "TPUJOB_ATTEMPT=1",
                       "TPUJOB_COORDINATOR=127.0.0.1:8476", f"TPUJOB_HOST_INDEX={i}",
                       "TPUJOB_JOB_ID=job-1", "TPUJOB_NUM_HOSTS=2", "TPUJOB_RUN_DIR=/mnt/run"]
        assert (root / "home" / "tpujob" / "pwd.txt").read_text() == "/home/tpujob/code\n"
        assert "s3cret" not in logs(group.hosts[i]).read_text()
        assert not any("s3cret" in p.read_text(errors="replace")
                       for p in root.rglob("*") if p.is_file() and p.name != "env.txt")


def test_stop_terms_then_kills_and_relaunch_replaces_a_stale_attempt(slice_hosts):
    machines, group = slice_hosts(1)
    first = attempt()
    program.launch(group, first, "trap 'echo bye > /mnt/term; exit 0' TERM; "
                                 "while :; do sleep 0.05; done")
    assert wait_state(group, first, "running")[0].state == "running"
    (again,) = program.launch(group, first, "echo must not run > /mnt/second")
    assert '"state": "running"' in again.output   # launching twice is a no-op
    (stopped,) = program.stop(group, first, grace_seconds=60)  # over once the trap has run
    assert '"state": "stopped"' in stopped.output
    assert (machines.host_root(0) / "mnt" / "term").read_text() == "bye\n"
    assert program.status(group, first)[0].state == "exited"

    program.launch(group, first, "trap '' TERM; while :; do sleep 0.05; done")
    second = attempt(attempt=2)
    (cleaned,) = program.clean(group, second, grace_seconds=0.3)   # stops attempt 1 (TERM ignored: KILL)
    stale = json.loads(cleaned.output)["ended"]
    program.launch(group, second, "sleep 30")
    assert program.status(group, first)[0].state == "lost" and stale == [program.status(group, first)[0].pid]
    assert program.status(group, second)[0].state == "running"
    assert not (machines.host_root(0) / "mnt" / "second").exists()


def test_names_env_and_command_full_of_shell_syntax_run_literally(slice_hosts):
    machines, group = slice_hosts(2)
    att = attempt(job_id="job " + NASTY, env={"NASTY": NASTY}, workdir="dir " + NASTY[:20])
    cmd = "printf '%s' \"$NASTY\" > /mnt/env; printf '%s' \"$TPUJOB_JOB_ID\" > /mnt/job; " \
          "printf '%s' " + __import__("shlex").quote(NASTY) + " > /mnt/cmd"
    assert all(r.ok for r in program.launch(group, att, cmd))
    assert [s.exit_code for s in wait_state(group, att, "exited")] == [0, 0]
    for i in range(2):
        mnt = machines.host_root(i) / "mnt"
        assert (mnt / "env").read_text() == NASTY
        assert (mnt / "job").read_text() == "job " + NASTY
        assert (mnt / "cmd").read_text() == NASTY
        assert not any(p.name.startswith("pwned") for p in mnt.iterdir())


def test_a_failed_runtime_install_fails_the_setup_before_the_users_setup(slice_hosts):
    machines, group = slice_hosts(1)
    att = attempt()
    (result,) = program.setup(group, att, "echo user-setup > /mnt/user-setup",
                              runtime_modules=("tpujob_no_such_module",),
                              runtime_packages=("/nonexistent/tpujob-no-such-package",))
    assert not result.ok and result.exit_code != 0
    assert "installing the runtime's packages" in result.output
    root = machines.host_root(0)
    assert not (root / "mnt" / "user-setup").exists()
    assert not (root / "home" / "tpujob" / ".tpujob" / "jobs" / "job-1" / "attempt-1" / "setup.done").exists()


def test_the_users_setup_runs_as_written_and_creates_the_run_dir(slice_hosts):
    machines, group = slice_hosts(1)
    att = attempt(run_dir="/mnt/runs/job 1")
    (result,) = program.setup(group, att, "false; echo after-false > /mnt/after")  # no set -e imposed
    assert result.ok, result.output
    assert (machines.host_root(0) / "mnt" / "after").read_text() == "after-false\n"
    assert (machines.host_root(0) / "mnt" / "runs" / "job 1").is_dir()


def test_a_setup_past_its_timeout_is_killed_on_the_host(slice_hosts):
    machines, group = slice_hosts(1)
    # Longer than the test's own timeout: a setup left to run out would fail the test.
    (result,) = program.setup(group, attempt(), "sleep 600; echo late > /mnt/late", timeout=1)
    assert result.exit_code == program.TIMED_OUT and not result.timed_out
    assert "setup timed out after 1s" in result.output
    assert not [pid for pid in machines.host_pids(0) if _command(pid).startswith("sleep 600")]
    assert not (machines.host_root(0) / "mnt" / "late").exists()


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("workdir, expected", [
    ("~", "/home/tpujob"),
    ("~/src", "/home/tpujob/src"),
    ("~/" + NASTY[:30], "/home/tpujob/" + NASTY[:30]),
    ("plain", "/home/tpujob/plain"),
    ("/mnt/abs", "/mnt/abs"),
])
def test_a_leading_tilde_in_the_workdir_is_the_home(slice_hosts, workdir, expected):
    machines, group = slice_hosts(1)
    att = attempt(workdir=workdir)
    assert all(r.ok for r in program.setup(group, att, "pwd > /mnt/setup-pwd"))
    assert all(r.ok for r in program.launch(group, att, "pwd > /mnt/pwd"))
    assert wait_state(group, att, "exited")[0].exit_code == 0
    mnt = machines.host_root(0) / "mnt"
    assert (mnt / "setup-pwd").read_text() == expected + "\n"
    assert (mnt / "pwd").read_text() == expected + "\n"
    assert not any(p.name.startswith("pwned") for p in mnt.iterdir())


def test_stop_fails_when_the_program_cannot_be_found_on_a_reachable_host(slice_hosts):
    machines, group = slice_hosts(2)
    att = attempt()
    program.launch(group, att, "sleep 30")
    pidfile = machines.host_root(1) / "home" / "tpujob" / ".tpujob" / "jobs" / "job-1" / "attempt-1" / "program.pid"
    good = pidfile.read_text()
    pidfile.write_text("garbage\n")
    results = program.stop(group, att, grace_seconds=1)
    assert results[0].ok and not results[1].ok
    assert "holds no pid" in results[1].output
    pidfile.write_text(good)
    assert all(r.ok for r in program.stop(group, att, grace_seconds=1))


def test_status_reads_the_json_line_among_stray_stderr_lines():
    from tpujob.hosts.fanout import HostResult

    line = '{"state": "running", "pid": 7, "exit_code": null, "log_bytes": 3, "step": 12, "resumed_from": 8}'

    class Group:  # stdout and stderr interleave as they came: a grep complaint may come last
        def run(self, command, timeout=None):
            return [HostResult(0, 0, line + "\ngrep: /mnt/run/heartbeat: No such file or directory\n"),
                    HostResult(1, 0, "garbage only\n")]

    first, second = program.status(Group(), attempt())
    assert (first.state, first.pid, first.step, first.resumed_from) == ("running", 7, 12, 8)
    assert second.state == "unreachable" and "unreadable status" in second.error


def _status_line(tmp_path, attempt: int, heartbeat: dict | None) -> dict:
    import json
    import subprocess

    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    if heartbeat is not None:
        (run_dir / "heartbeat").write_text(json.dumps(heartbeat, sort_keys=True) + "\n")
    from tpujob.runtime.contract import LEDGER_KEYS

    script = render("status.sh", job_dir=str(tmp_path / "job"), attempt=attempt, run_dir=str(run_dir),
                    tail_bytes=1024, ledger_keys=" ".join(LEDGER_KEYS))
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_status_counts_only_this_attempts_heartbeat(tmp_path):
    """The run dir outlives attempts: attempt 11 starting must not report attempt 10's step and
    resumed-from step as its own (the store would record them, and count steps lost that were not)."""
    beat = {"job_id": "000004", "attempt": 10, "host": 0, "step": 120, "resumed_from": 100,
            "phase": "training", "time": 1.0}
    assert (_status_line(tmp_path, 10, beat)["step"], _status_line(tmp_path, 10, beat)["resumed_from"]) == (120, 100)
    mine = _status_line(tmp_path, 11, beat)
    assert (mine["state"], mine["step"], mine["resumed_from"]) == ("absent", None, None)
    assert _status_line(tmp_path, 11, {**beat, "attempt": 11, "step": 101})["step"] == 101
    assert _status_line(tmp_path, 11, {**beat, "attempt": 11, "total": 5000})["total"] == 5000  # list's STEP
    assert _status_line(tmp_path, 10, {**beat, "total": 5000})["total"] == 5000
    assert _status_line(tmp_path, 11, {**beat, "total": 5000})["total"] is None  # not this attempt's
    assert _status_line(tmp_path, 11, {**beat, "attempt": 1})["step"] is None  # 1 is not 11
    assert _status_line(tmp_path / "none", 11, None)["step"] is None
    # A program that leaves "attempt" out: believed for a heartbeat written since the launch.
    import os

    unsigned = {k: v for k, v in beat.items() if k != "attempt"}
    launched = tmp_path / "job" / "attempt-11" / "program.pid"
    launched.parent.mkdir(parents=True)
    launched.write_text("999999\n")
    os.utime(launched, (1000, 1000))
    assert _status_line(tmp_path, 11, unsigned)["step"] == 120  # written now, after the launch
    os.utime(tmp_path / "run" / "heartbeat", (500, 500))
    assert _status_line(tmp_path, 11, None)["step"] is None  # from before it


def test_status_passes_on_what_the_program_measured_for_the_ledger(tmp_path):
    beat = {"attempt": 3, "step": 50, "phase": "training", "compile_ms": 4200, "checkpoint_ms": 900,
            "save_ms": 300, "startup": {"compile_s": 4.2}, "mtbi_ms": 86400000}
    assert _status_line(tmp_path, 3, beat)["reported"] == {"compile_ms": 4200, "checkpoint_ms": 900,
                                                          "save_ms": 300, "mtbi_ms": 86400000}
    assert _status_line(tmp_path, 4, beat)["reported"] is None  # another attempt's
    assert _status_line(tmp_path, 3, {"attempt": 3, "step": 1})["reported"] is None  # a program that says none


def test_status_reads_reported_into_the_host_status():
    from tpujob.hosts.fanout import HostResult

    line = ('{"state": "running", "pid": 7, "exit_code": null, "log_bytes": 3, '
            '"reported": {"compile_ms": 10, "bogus": 1, "step_ms": "x"}}')

    class Group:
        def run(self, command, timeout=None):
            return [HostResult(0, 0, line + "\n")]

    (host,) = program.status(Group(), attempt())
    assert host.reported == {"compile_ms": 10}


def _holders(machines, index: int) -> list[int]:
    """Processes on host `index` holding its emulated accelerator device."""
    found = []
    for pid in machines.host_pids(index):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if "/dev/vfio/0" in links:
            found.append(pid)
    return found


def test_clean_ends_the_tpu_holder_of_its_own_host_only_and_removes_libtpus_lock(slice_hosts):
    machines, group = slice_hosts(1)
    other, _ = slice_hosts(1)
    mine, theirs = machines.dirty_host(0), other.dirty_host(0)
    assert _holders(machines, 0) == [mine] and _holders(other, 0) == [theirs]
    lock = machines.host_root(0) / "tmp" / "libtpu_lockfile"
    lock.write_text("")
    (cleaned,) = program.clean(group, attempt())
    assert cleaned.ok, cleaned.describe()
    assert json.loads(cleaned.output) == {"ended": [mine], "held": []}
    assert _holders(machines, 0) == [] and not lock.exists()
    # Another host's TPU user (the same path, in another namespace) is not this host's to end.
    assert _holders(other, 0) == [theirs]


def test_a_sticky_tpu_holder_comes_back_after_cleaning(slice_hosts):
    machines, group = slice_hosts(1)
    first = machines.dirty_host(0, sticky=True)
    (cleaned,) = program.clean(group, attempt())
    assert json.loads(cleaned.output)["ended"] == [first]
    deadline = time.monotonic() + 120  # bounds a hang only
    while not _holders(machines, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    back = _holders(machines, 0)
    assert back and back != [first]


def test_status_of_a_dead_program_carries_when_and_its_last_log_lines(slice_hosts):
    machines, group = slice_hosts(2)
    att = attempt()
    # Host 1 dies once the test has seen host 0 dead (the file it waits for), not after a sleep.
    program.launch(group, att, 'if [ "$TPUJOB_HOST_INDEX" = 1 ]; then until [ -e /mnt/go ]; do sleep 0.05; done; fi; '
                               'echo "step 1"; echo "Fatal Python error: Aborted" >&2; kill -ABRT $$')
    deadline = time.monotonic() + 120  # bounds a hang only
    while program.status(group, att)[0].state != "exited":
        assert time.monotonic() < deadline, program.status(group, att)
        time.sleep(0.05)
    (machines.host_root(1) / "mnt" / "go").touch()
    statuses = wait_state(group, att, "exited")
    assert [s.exit_code for s in statuses] == [134, 134]
    assert all("Fatal Python error: Aborted" in s.log_tail and "step 1" in s.log_tail for s in statuses), statuses
    assert statuses[0].ended_at < statuses[1].ended_at   # host 0 died first


def test_clean_leaves_this_attempts_own_running_program_its_tpu(slice_hosts):
    machines, group = slice_hosts(1)
    att = attempt()
    # Holds the device as the runtime does; cleaning before a retried launch of the same attempt
    # must not end it (the launch is then a no-op).
    program.launch(group, att, 'exec 3< /dev/vfio/0; exec sleep 30')
    (running,) = wait_state(group, att, "running")
    deadline = time.monotonic() + 120  # bounds a hang only
    while not _holders(machines, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _holders(machines, 0)   # the program's own process, in its group
    (cleaned,) = program.clean(group, att)
    assert json.loads(cleaned.output) == {"ended": [], "held": []}
    assert program.status(group, att)[0].state == "running"


def test_the_runtime_check_finds_its_modules_without_importing_them(slice_hosts):
    """Found, not imported (importing jax costs seconds per host and attempt): present modules
    install nothing; a missing one, or a dotted one whose package is missing, installs."""
    machines, group = slice_hosts(1)
    (present,) = program.setup(group, attempt(), "true", runtime_modules=("json", "email.mime"),
                               runtime_packages=("/nonexistent/tpujob-no-such-package",))
    assert present.ok and "installing the runtime's packages" not in present.output
    (missing,) = program.setup(group, attempt(attempt=2), "true", runtime_modules=("json", "tpujob_no_such.sub"),
                               runtime_packages=("/nonexistent/tpujob-no-such-package",))
    assert not missing.ok and "installing the runtime's packages" in missing.output

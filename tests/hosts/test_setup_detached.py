"""Setup runs detached on the hosts (issue 26): starting it returns at once, its state is read
later, a second start never runs it twice, and a failure keeps the host's words."""

from __future__ import annotations

import time

from tpujob.hosts import program
from tpujob.hosts.program import HostAttempt


def attempt(**kw) -> HostAttempt:
    base = dict(job_id="job-1", attempt=1, coordinator="127.0.0.1:8476", run_dir="/mnt/run", workdir="code")
    return HostAttempt(**{**base, **kw})


def wait_setup(group, att, seconds: float = 120) -> list:
    """The hosts' setup states once none is running; the deadline only bounds a hang."""
    deadline = time.monotonic() + seconds
    while True:
        states = program.setup_state(group, att)
        if all(s.state != "running" for s in states) or time.monotonic() > deadline:
            return states
        time.sleep(0.1)


def test_setup_starts_detached_runs_once_and_is_observed_done(slice_hosts):
    machines, group = slice_hosts(2)
    att = attempt(secrets={"TOKEN": "s3cret"})
    # The setup waits for a file the test makes: it cannot be over before the test says so,
    # so a start that waited for it would never return.
    script = program.setup_script(att, 'until [ -e /mnt/go ]; do sleep 0.05; done; '
                                       'echo "ran $TOKEN" >> /mnt/setup-count')
    started = program.start_setup(group, att, script, wait_seconds=0)
    assert [s.state for s in started] == ["running"] * 2
    again = program.start_setup(group, att, script, wait_seconds=0)  # a second sweep's start: a no-op
    assert [s.state for s in again] == ["running"] * 2
    group.close()  # the setup outlives the SSH sessions
    for i in range(2):
        (machines.host_root(i) / "mnt" / "go").touch()
    assert [(s.state, s.exit_code) for s in wait_setup(group, att)] == [("done", 0)] * 2
    assert [s.state for s in program.start_setup(group, att, script)] == ["done"] * 2
    for i in range(2):
        assert (machines.host_root(i) / "mnt" / "setup-count").read_text() == "ran s3cret\n"  # once


def test_a_failed_setup_is_observed_with_its_stderr(slice_hosts):
    _, group = slice_hosts(1)
    att = attempt()
    (started,) = program.start_setup(group, att, program.setup_script(
        att, "echo resolving >&1; echo 'pip: no such package' >&2; exit 3"))
    assert started.state == "failed"  # over within the start's wait
    (state,) = wait_setup(group, att)
    assert (state.state, state.exit_code) == ("failed", 3)
    assert "pip: no such package" in state.said and "setup command exited 3" in state.said
    assert [s.state for s in program.start_setup(group, att, "true")] == ["failed"]  # never run again


def test_a_16_kb_setup_full_of_quotes_runs(slice_hosts):
    """Issue 45: quoted three times into one SSH argument (setup.sh, setup_start.sh, the
    command), a 16 KB setup with 3,000 quotes made a 180,688-byte argument, past the 131,072 bytes
    Linux takes as one (MAX_ARG_STRLEN), and failed on the host only. Now every script travels
    on stdin (hosts.scripts.HostCommand) and setup.sh is a file on the host."""
    machines, group = slice_hosts(1)
    att = attempt()
    line = "echo 'it''s' '' >> /mnt/quotes \n"   # 6 quotes a line, 32 bytes
    command = line * 500
    assert len(command) == 16_000 and command.count("'") == 3000
    program.start_setup(group, att, program.setup_script(att, command))
    (state,) = wait_setup(group, att)
    assert (state.state, state.exit_code) == ("done", 0), state.said
    assert (machines.host_root(0) / "mnt" / "quotes").read_text() == "its \n" * 500

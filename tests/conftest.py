"""Shared fixtures: every test gets its own TPUJOB_HOME, and a runner for the real CLI entry point."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest
import suite_schedule

# Settings a developer's shell may carry; a test must never see them (nor touch ~/.tpujob).
_SETTING_VARS = ("TPUJOB_CLOUD", "TPUJOB_PROJECT", "TPUJOB_ZONE", "TPUJOB_SSH_USER", "TPUJOB_DB_URL",
                 "TPUJOB_DEBUG", "TPUJOB_EMULATOR_DIR", "TPUJOB_SSH_HOST_KEYS", "TPUJOB_SMTP_HOST",
                 "TPUJOB_SMTP_PORT", "TPUJOB_SMTP_FROM", "TPUJOB_SMTP_STARTTLS", "TPUJOB_SMTP_USERNAME",
                 "TPUJOB_SMTP_PASSWORD", "TPUJOB_NOTIFY_TIMEOUT", "TPUJOB_SSH_OS_LOGIN", "TPUJOB_USER")


# Not under /tmp, /home, /root or /mnt, which each emulated host has its own of.
SHARED_JAX_CACHE = Path("/var/tmp/tpujob-tests/jax-compile-cache")


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: absent under `-p no:xdist`
def pytest_xdist_auto_num_workers(config) -> int:
    return suite_schedule.workers()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return suite_schedule.scheduler(config, log)


def pytest_runtest_logstart(nodeid, location) -> None:
    _timeline("start", nodeid)


def pytest_runtest_logfinish(nodeid, location) -> None:
    _timeline("end", nodeid)


def _timeline(what: str, nodeid: str) -> None:
    """`TPUJOB_TEST_TIMELINE=DIR`: each worker appends when each test starts and ends to
    DIR/WORKER.txt, to see where a run's cores sat idle and what ran last (docs/benchmarks.md);
    where it can, with the CPU-seconds the worker and every process it started have used so far."""
    folder = os.environ.get("TPUJOB_TEST_TIMELINE")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)  # not there yet: an INTERNALERROR before
        used = _cpu_used()
        with open(Path(folder) / f"{worker}.txt", "a") as log:
            log.write(f"{time.time():.2f} {what} {nodeid}" + ("" if used is None else f"\t{used:.2f}") + "\n")


# A test's CPU is mostly other processes': emulators, emulated hosts and their programs, sweeps.
# Where cgroup v1's cpuacct controller is mounted and writable (as root on this project's
# machines), the worker moves into a group of its own, which everything it starts then joins,
# daemons included, and the group's counter says what they all used. Elsewhere the timeline has
# times only.
_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _cpu_used() -> float | None:
    group = _CPUACCT / f"tpujob-tests-{os.getpid()}"
    try:
        if not group.exists():
            _remove_stale_groups()
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
        return int((group / "cpuacct.usage").read_text()) / 1e9
    except OSError:
        return None


def _remove_stale_groups() -> None:
    """The groups of workers that have exited: a worker's group outlives it while its daemons
    end, so the controller, last to go, removes them (and a run's first worker any left)."""
    for stale in _CPUACCT.glob("tpujob-tests-*"):
        if not Path(f"/proc/{stale.name.rsplit('-', 1)[1]}").exists():
            try:
                stale.rmdir()
            except OSError:  # something still runs in it
                pass


def pytest_unconfigure(config) -> None:
    if not os.environ.get("TPUJOB_TEST_TIMELINE"):
        return
    group = _CPUACCT / f"tpujob-tests-{os.getpid()}"
    if group.exists():  # back to the root group, then the empty group goes (not while a daemon is in it)
        try:
            (_CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        except OSError:
            pass
    if "PYTEST_XDIST_WORKER" not in os.environ:
        _remove_stale_groups()


def pytest_collection_modifyitems(config, items: list[pytest.Item]) -> None:
    """Longest first: xdist hands tests out in this order (the CPU-bound ones capped,
    tests/suite_schedule.py), so the long end-to-end tests do not end the run alone while the
    many short ones are done. The sort is stable: within one length, tests keep their file
    order (and so their module fixtures)."""
    items.sort(key=suite_schedule.expected_length, reverse=True)


@pytest.fixture(autouse=True)
def tpujob_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "tpujob-home"
    monkeypatch.setenv("TPUJOB_HOME", str(home))
    for name in _SETTING_VARS:
        monkeypatch.delenv(name, raising=False)
    return home


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        """The single `error: ...` line the CLI promises on failure (asserted to be alone)."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"expected one error line, got: {self.err!r}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


@pytest.fixture
def cli(capsys):
    """Run `tpujob ARGS...` in-process through `tpujob.cli.main.main` and capture its output."""
    from tpujob.cli.main import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def spec_file(tmp_path):
    """Write a spec's YAML text to a file and return its path."""
    counter = iter(range(10_000))

    def write(text: str, name: str | None = None) -> Path:
        path = tmp_path / (name or f"spec{next(counter)}.yaml")
        path.write_text(text)
        return path

    return write


def job_rows(home: Path) -> int:
    """How many jobs the store under `home` holds; 0 when no database was even created."""
    db = home / "tpujob.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='job'").fetchone()
        return conn.execute("SELECT count(*) FROM job").fetchone()[0] if has_table else 0


@pytest.fixture
def stored_jobs(tpujob_home):
    """Callable: the number of job rows in this test's store (0 when no database exists)."""
    return lambda: job_rows(tpujob_home)


@pytest.fixture
def server(tmp_path):
    """The TPU and Compute APIs of an emulator in this process, on a free port; no hosts, no
    Cloud Storage (tests that need hosts pass a machines factory of their own)."""
    from tpujob.emulator.server import EmulatorServer

    with EmulatorServer(tmp_path / "emulator", provisioning_delay=0.0, storage=False) as srv:
        yield srv


@pytest.fixture
def http(server):
    """Call the in-process emulator with plain JSON, as a client other than Google's would:
    `http(method, path, body=None)` -> (status code, body), an error status included."""
    import json
    import urllib.error
    import urllib.request

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    return call


class StandIn:
    """An HTTP server of a test's own on 127.0.0.1 (a service tpujob calls, played by the test):
    every GET and POST, whatever its path, is answered by `answer(request)` -> (status, body,
    headers), the request's body read first. `url`: its base; `asked`: the requests answered."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], tuple[int, bytes, dict[str, str]]]):
        self.asked = 0
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stand_in.asked += 1
                status, body, headers = answer(self)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    """`stand_in(answer)` -> a StandIn (above) answering with `answer`; shut after the test."""
    started: list[StandIn] = []

    def start(answer) -> StandIn:
        started.append(StandIn(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def shared_jax_cache() -> Path:
    """JAX's persistent compilation cache for every runtime the tests start, on emulated hosts
    or here, from every xdist worker: a program compiled by one is a cache hit for the others
    (about 2.4 CPU-seconds to the first step instead of 8 on this machine). An entry read while
    another process still writes it is a warning and a compile (jax/_src/compiler.py,
    _cache_read), never a wrong program: its zlib stream (no zstandard installed) ends with a
    checksum."""
    SHARED_JAX_CACHE.mkdir(parents=True, exist_ok=True)
    return SHARED_JAX_CACHE


@pytest.fixture(scope="session")
def shared_emulator(tmp_path_factory, shared_jax_cache):
    """One background emulator (`tpujob emulator start`, provisioning without delay) for the
    whole session; tests reach it through `local_cloud`.

    Its hosts' image points JAX at one compilation cache for every job of every test run here
    (as a team's image might, at a bucket), so the tiny model compiles once rather than once per
    job: about 5 of the 8 CPU-seconds a program takes to reach its first step, on a machine
    where CPU bounds the suite. It lies outside the hosts' own directories, so they all see it.
    The runtime's own default, a cache in the job's run dir, is what the demo's tests exercise
    (they run their own emulator)."""
    import os

    from tpujob.emulator import process

    directory = tmp_path_factory.mktemp("emulator")
    previous = os.environ.get("TPUJOB_EMULATOR_DIR")
    os.environ["TPUJOB_EMULATOR_DIR"] = str(directory)
    try:
        info = process.start(provisioning_delay=0.0, image_env={"JAX_COMPILATION_CACHE_DIR": str(shared_jax_cache)})
        yield info
    finally:
        process.stop(grace=5)
        if previous is None:
            os.environ.pop("TPUJOB_EMULATOR_DIR", None)
        else:
            os.environ["TPUJOB_EMULATOR_DIR"] = previous


@pytest.fixture
def local_cloud(shared_emulator, monkeypatch):
    """The test's store talks to the shared emulator; returns its fault/inspection client."""
    from tpujob.emulator.client import EmulatorClient

    monkeypatch.setenv("TPUJOB_EMULATOR_DIR", str(Path(shared_emulator["log_file"]).parent))
    client = EmulatorClient(shared_emulator["tpu_endpoint"])
    client.set_faults(api_error_rate=0.0, hostkeys_delay=0.0)
    return client


@pytest.fixture
def no_emulator_left(tpujob_home):
    """Fails a test that started a background emulator in its own home and left it running
    (a stray `python -m tpujob.emulator` outlives pytest); stops it first so nothing leaks."""
    yield
    from tpujob.emulator import process

    if os.environ.get("TPUJOB_EMULATOR_DIR"):
        return  # the test used the shared emulator, which the session stops
    left = process.status()
    if left:
        process.stop(grace=5)
        pytest.fail(f"the test left an emulator running (pid {left['pid']}) in {tpujob_home}")


# A stand-in for `crontab` (Debian's cron package, /usr/bin/crontab) that keeps the table in a
# file of the test's own: the tests never read or write the invoking user's crontab, which on a
# shared machine is that person's. It answers as the real program does where tpujob reads it:
# `-l` prints the table or says "no crontab for USER" (exit 1); `-` or FILE installs a table and
# refuses one with a line that is not `MIN HOUR DOM MON DOW COMMAND` ("bad minute" and so on, then
# "errors in crontab file, can't install.", exit 1) or that lacks its last newline; `-r` removes
# it. The words are those of Debian's cron 3.0pl1's crontab (its strings).
STAND_IN_CRONTAB = r"""#!/bin/bash
table="$STAND_IN_CRONTAB_TABLE"
fields=(minute hour "day-of-month" month "day-of-week")
install() {
    local text n=0 line words i
    text=$(cat "$1"; printf x)
    text=${text%x}
    if [[ -n $text && ${text: -1} != $'\n' ]]; then
        echo "new crontab file is missing newline before EOF, can't install." >&2; exit 1
    fi
    while IFS= read -r line; do
        n=$((n + 1))
        [[ $line =~ ^[[:space:]]*(#|$) || $line =~ ^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*[[:space:]]*= ]] && continue
        read -ra words <<< "$line"
        [[ ${words[0]} == @* ]] && continue
        for i in 0 1 2 3 4; do  # names (jan, mon) in the last two fields only
            pattern='^[0-9*/,-]+$'; [[ $i -ge 3 ]] && pattern='^[0-9a-zA-Z*/,-]+$'
            if [[ ! ${words[i]} =~ $pattern ]]; then
                echo "\"$2\":$n: bad ${fields[i]}" >&2; echo "errors in crontab file, can't install." >&2; exit 1
            fi
        done
        if [[ ${#words[@]} -lt 6 ]]; then
            echo "\"$2\":$n: bad command" >&2; echo "errors in crontab file, can't install." >&2; exit 1
        fi
    done <<< "$text"
    printf %s "$text" > "$table"
}
case "${1-}" in
    -l) [[ -f $table ]] && exec cat "$table"; echo "no crontab for $(id -un)" >&2; exit 1 ;;
    -r) [[ -f $table ]] && exec rm "$table"; echo "no crontab for $(id -un)" >&2; exit 1 ;;
    -) install /dev/stdin - ;;
    -*|"") echo "crontab: the stand-in takes -l, -r, - or FILE (not ${1-nothing})" >&2; exit 2 ;;
    *) install "$1" "$1" ;;
esac
"""


@pytest.fixture
def stand_in_crontab(tmp_path, monkeypatch):
    """`crontab` on PATH is a stand-in whose table is a file of this test's (returned), also for
    the processes the test starts: the invoking user's crontab is never touched."""
    bin_dir = tmp_path / "crontab-bin"
    bin_dir.mkdir()
    program = bin_dir / "crontab"
    program.write_text(STAND_IN_CRONTAB)
    program.chmod(0o755)
    table = tmp_path / "crontab-table"
    monkeypatch.setenv("STAND_IN_CRONTAB_TABLE", str(table))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return table


@pytest.fixture
def offline(monkeypatch):
    """Create without a cloud: counts the cloud clients made; the job is recorded, not followed."""
    from tpujob.cli import jobs as cli_jobs
    from tpujob.service import jobs

    made: list[str] = []
    monkeypatch.setattr(jobs, "make_cloud", lambda settings: made.append("cloud"))
    monkeypatch.setattr(cli_jobs, "follow_job", lambda ctx, job_id, **kw: ctx.store.get(job_id))
    return made


@pytest.fixture(scope="session")
def postgres_cluster():
    """A PostgreSQL server of the session's own (tests/pg_cluster.py). Skipped only where no
    server binaries are installed; a server that is installed but fails to start fails the tests."""
    from pg_cluster import Cluster, server_bin

    bindir = server_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (Debian: apt-get install postgresql; "
                    "`scripts/setup --test` installs them)")
    cluster = Cluster(bindir).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster) -> str:
    """The SQLAlchemy URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_cluster.new_database()


# ---- the cloud layer against the in-process emulator (`server`): tests/cloud, tests/attempt --

@pytest.fixture(scope="session")
def _compute_module():
    from tpujob.cloud import disks  # 2.6 s of imports: once per session

    return disks


@pytest.fixture
def compute(server, _compute_module):
    return _compute_module.GcpCompute.for_emulator(server.url)


@pytest.fixture
def cloud(server):
    from tpujob.cloud.tpu_api import GcpCloud

    return GcpCloud.for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05,
                                 poll_interval=0.01)


# ---- a job's night pinned by hand (a preemption, then a second attempt running), shared by
# the timeline, dashboard and quick-start tests --------------------------------------------

STORY_SPEC = """\
name: night
tpu: {accelerator: v4-8, zone: us-central2-b, provisioning: on-demand}
run: {command: train}
"""


@pytest.fixture
def story(spec_file):
    """Created at T+1000 (T: now - 1200 s, so `show`'s now is about T+1200); attempt 1
    provisions at 1010, sets up at 1020, runs 1080-1090 and is preempted; attempt 2 starts at
    1130 and runs from 1150."""
    from tpujob.service import jobs
    from tpujob.service.context import Context
    from tpujob.store.states import State

    T = time.time() - 1200.0
    now = [T + 1000.0]
    ctx = Context.load()
    ctx.store.clock = lambda: now[0]
    job, _ = jobs.record(ctx, str(spec_file(STORY_SPEC)))
    store = ctx.store
    for at, step in ((1010.0, lambda: store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "go",
                                                         zone="us-central2-b", accelerator="v4-8", queued=False)),
                     (1020.0, lambda: store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")),
                     (1080.0, lambda: store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched")),
                     (1090.0, lambda: store.transition(job.id, State.RUNNING, State.RECOVERING, "preempted",
                                                       preemptions=1)),
                     (1090.0, lambda: store.end_attempt(job.id, 1, "preempted")),
                     (1130.0, lambda: store.start_attempt(job.id, State.RECOVERING, State.PROVISIONING, "again",
                                                         zone="us-central2-b", accelerator="v4-8", queued=False)),
                     (1140.0, lambda: store.transition(job.id, State.PROVISIONING, State.SETTING_UP, "ready")),
                     (1150.0, lambda: store.transition(job.id, State.SETTING_UP, State.RUNNING, "launched"))):
        now[0] = T + at
        step()
    return ctx, store.get(job.id), T

"""Helpers for the reconcile tests against the shared emulator.

Every test runs in a project of its own (TPUJOB_PROJECT), so the slice names its jobs derive
(tpujob-000001-1, ...) never meet another test's leftovers in the shared emulator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from tpujob.names import node_names

ROOT = Path(__file__).resolve().parents[2]

ZONE = "us-central2-b"
# v4 is offered only in us-central2-b (Google's zone table, which the emulator enforces): the
# tests that move between zones run a v5e, in zones that offer it.
V5E = "v5litepod-4"
FALLBACK_ZONE = "us-west1-c"
# The demo's learning-rate schedule (jobs.example.yaml trains 30 steps, so it decays over 30),
# for every test that trains the tiny model at the demo's batch and sequence length. JAX's
# compile-cache key holds the schedule's constants, so a test with `steps` of its own compiled
# its own program, on each host that started before host 0 had written it: on a fresh machine's
# empty cache, most of the suite's compiles. With this, one program per host count.
DEMO_OPTIMIZER = "{decay_steps: 30}"

SPEC = """\
name: {name}
tpu:
  accelerator: {accelerator}
  zone: {zone}
  queued: {queued}
  slices: {slices}
  fallback: {fallback}
requeue: {requeue}
run:
  command: {command}
"""


def spec_text(name="rq", *, command="sleep 600", accelerator="v4-8", zone=ZONE, queued=False, slices=1,
              fallback=(), max_preemptions=5, max_failures=0, max_nan=3, backoff_seconds=0,
              min_run_seconds=None, setup=None, **requeue_keys) -> str:
    """`backoff_seconds=None` and `min_run_seconds=None` leave the key out (its default); any
    other `requeue:` key of the spec (`unhealthy_grace_seconds=1`) goes in as given. `setup`:
    the job's setup command, if any."""
    requeue = dict(backoff_seconds=backoff_seconds, min_run_seconds=min_run_seconds,
                   max_preemptions=max_preemptions, max_failures=max_failures, max_nan=max_nan, **requeue_keys)
    text = SPEC.format(name=name, accelerator=accelerator, zone=zone, queued=json.dumps(queued), slices=slices,
                       fallback=json.dumps([{"zone": z} for z in fallback]), command=json.dumps(command),
                       requeue=json.dumps({k: v for k, v in requeue.items() if v is not None}))
    return text + (f"setup: {json.dumps(setup)}\n" if setup is not None else "")


def local_cloud_faults_off(ctx) -> None:
    from tpujob.emulator import process

    process.client().set_faults(api_error_rate=0.0)


def record(ctx, tmp_path: Path, name="rq", **kwargs):
    from tpujob.service import jobs

    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(spec_text(name, **kwargs))
    job, _ = jobs.record(ctx, str(path))
    return job


def reconciler(ctx):
    from tpujob.service.keep_alive import reconciler as make

    return make(ctx)


def sweep_until(ctx, job_id: int, done, *, timeout=60.0, rec=None, pause=0.1):
    """Sweep the job until `done(job)`; returns the job. Fails the test on timeout."""
    rec = rec or reconciler(ctx)
    deadline = time.monotonic() + timeout
    while True:
        rec.sweep([job_id])
        job = ctx.store.get(job_id)
        if done(job):
            return job
        if time.monotonic() > deadline:
            events = "\n".join(f"  {e.kind}: {e.message}" for e in ctx.store.events(job_id))
            raise AssertionError(f"job {job_id} still {job.state} after {timeout} s:\n{events}")
        time.sleep(pause)


def running(job) -> bool:
    return job.state == "RUNNING"


def api_list(client, project: str, zone: str, kind: str) -> list[dict]:
    url = f"{client.url}/v2/projects/{project}/locations/{zone}/{kind}"
    with urllib.request.urlopen(url) as response:
        return json.loads(response.read()).get(kind, [])


def resources(client, project: str, zones=(ZONE,)) -> list[tuple[str, str, str]]:
    """(kind, zone, name) of every node and queued resource in the project's zones."""
    found = []
    for zone in zones:
        for kind in ("nodes", "queuedResources"):
            found += [(kind, zone, item["name"].rsplit("/", 1)[-1]) for item in api_list(client, project, zone, kind)]
    return found


def node_ref(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/locations/{zone}/nodes/{name}"


def host_root(client, project: str, zone: str, name: str, index: int) -> Path:
    hosts = client.hosts(node_ref(project, zone, name))
    return Path(next(h["root"] for h in hosts if h["index"] == index))


def wait_for_file(path: Path, timeout=20.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)
    return path.read_text()


def assert_no_orphans(ctx, client, project: str, zones=(ZONE,)) -> None:
    """Every node and queued resource belongs to exactly one live attempt (not ended, of an
    active job), and each such attempt's node exists at most once."""
    live: dict[tuple[str, str], int] = {}
    for job in ctx.store.list_jobs():
        attempt = ctx.store.current_attempt(job.id)
        if attempt is not None and attempt.ended_at is None:
            names = {attempt.slice_name, *node_names(attempt.slice_name, attempt.slices)}  # multislice: its nodes
            for key in ((attempt.zone, name) for name in names):
                assert key not in live, f"{key} claimed by jobs {live[key]} and {job.id}"
                live[key] = job.id
    found = resources(client, project, zones)
    orphans = [r for r in found if (r[1], r[2]) not in live]
    assert not orphans, f"resources no live attempt owns: {orphans}"
    names = [(r[0], r[1], r[2]) for r in found]
    assert len(names) == len(set(names)), f"duplicates: {names}"


def requeue_processes(count: int, *, env_extra: dict | None = None, timeout=120.0):
    """Start `count` separate `tpujob requeue` processes with this test's environment."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, **(env_extra or {}))
    # --debug: a process that fails on something unexpected prints where (its traceback), which
    # the test's assertion shows; it changes nothing else.
    return [subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "--debug", "requeue"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(count)]


def finish(processes, timeout=120.0) -> list[tuple[int, str, str]]:
    results = []
    for p in processes:
        out, err = p.communicate(timeout=timeout)
        results.append((p.returncode, out, err))
    return results


def record_many(ctx, tmp_path: Path, count: int, **kwargs) -> list:
    """`count` jobs from one spec file (recording is the cheap part; sweeps start them)."""
    from tpujob.service import jobs

    path = tmp_path / "many.yaml"
    path.write_text(spec_text("many", **kwargs))
    return [jobs.record(ctx, str(path))[0] for _ in range(count)]


def assert_consistent(ctx, job) -> None:
    """The attempts, the counters and the events of one job tell the same story."""
    attempts = ctx.store.attempts(job.id)
    assert [a.number for a in attempts] == list(range(1, job.attempt + 1))
    assert len({a.slice_name for a in attempts}) == len(attempts), "a slice name was used twice"
    assert all(a.ended_at is not None for a in attempts[:-1]), "an earlier attempt never ended"
    events = ctx.store.events(job.id)
    assert sum(e.kind == "attempt" for e in events) == len(attempts)
    assert sum(a.end_reason == "preempted" for a in attempts) == job.preemptions
    states = [e.to_state for e in events if e.to_state]
    assert states[-1] == job.state


def bucket_heartbeat(bucket, job_id) -> dict:
    """A job's heartbeat in its run dir's bucket (`runs/JOB/heartbeat`), {} before one: read at
    once, where a sweep on a loaded machine takes seconds to record it."""
    from google.api_core.exceptions import NotFound

    try:  # the latest generation: the runtime replaces the heartbeat each second
        return json.loads(bucket.blob(f"runs/{job_id}/heartbeat").download_as_bytes())
    except NotFound:
        return {}


def heartbeat_step(bucket, job_id: str) -> int:
    """The step a job's heartbeat in its bucket says; 0 before one."""
    return bucket_heartbeat(bucket, job_id).get("step") or 0


class AtStep(threading.Thread):
    """Calls `act(step)` once a job's heartbeat in its bucket says `step` or later, from a thread
    of its own, polling every 0.2 s. The test's sweeps go on meanwhile; one sweep on a loaded
    machine takes seconds, and a program whose hosts all find their compile in the cache trains
    the tiny model's steps in tenths of a second, so a check between sweeps can come after the
    program is done. `result()` gives back what `act` returned, or raises what it raised."""

    def __init__(self, bucket, job_id: str, step: int, act, timeout: float = 300):
        super().__init__(daemon=True, name=f"at-step-{step}")
        self._bucket, self._job_id, self._step, self._act, self._timeout = bucket, job_id, step, act, timeout
        self._value = self._error = None
        self.start()

    def run(self) -> None:
        try:
            deadline = time.monotonic() + self._timeout
            while (seen := heartbeat_step(self._bucket, self._job_id)) < self._step:
                assert time.monotonic() < deadline, f"job {self._job_id} never reached step {self._step}"
                time.sleep(0.2)
            self._value = self._act(seen)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread by result()
            self._error = e

    def result(self, timeout: float = 300):
        self.join(timeout)
        assert not self.is_alive(), f"still waiting for step {self._step} of job {self._job_id}"
        if self._error is not None:
            raise self._error
        return self._value


def named_bucket(name: str):
    """The emulator's bucket `name` through the settings' storage client, made by the first test
    that asks: the shared emulator, and its buckets, outlive each test (runs under a prefix)."""
    from tpujob.clients import make_storage
    from tpujob.service.context import Context

    gcs = make_storage(Context.load().settings)
    if gcs.lookup_bucket(name) is None:
        gcs.create_bucket(name)
    return gcs.bucket(name)


def local_bucket(shared_emulator, project: str, prefix: str):
    """A new bucket of the shared emulator's Cloud Storage (a job's `run_dir: gs://...`)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tpujob.attempt.buckets import create_local_bucket

    client = storage.Client(project=project, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": shared_emulator["storage_endpoint"]})
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_local_bucket(client, name)
    return client.bucket(name)


class Node:
    """One login node of a lab (test_lab.py, test_lab_scheduler.py): its home, the lab's store URL,
    its own clock, its person (`user`); its commands real `tpujob` processes."""

    def __init__(self, home: Path, url: str, skew: float, user: str):
        self.home, self.url, self.skew, self.user = home, url, skew, user

    def env(self) -> dict[str, str]:
        return {**os.environ, "TPUJOB_HOME": str(self.home), "TPUJOB_DB_URL": self.url,
                "TPUJOB_CLOCK_SKEW_SECONDS": str(self.skew), "TPUJOB_USER": self.user,
                "TPUJOB_EMULATOR_ACCOUNT": self.user}

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", *args], env=self.env(), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "tpujob.cli.main", *args], env=self.env(), cwd=ROOT,
                              capture_output=True, text=True, timeout=240)
        if ok:
            assert done.returncode == 0, f"tpujob {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done


# Real answers Google gave (each with its source), replayed by `tpujob emulator fail-next`.
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gcp_errors"


def payload(name: str) -> dict:
    found = json.loads((FIXTURES / f"{name}.json").read_text())
    assert found["source"]  # every replayed answer says where Google was seen giving it
    return found


def requeue_and_show(cli, job_id: int) -> dict:
    assert cli("requeue", str(job_id)).code == 0
    shown = cli("show", str(job_id), "--json")
    assert shown.code == 0, shown.err
    return json.loads(shown.out)


def messages(shown: dict) -> str:
    return "\n".join(e["message"] for e in shown["events"])

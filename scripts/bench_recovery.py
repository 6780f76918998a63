"""Benchmark of recovery after a preemption, against a fresh emulator of its own (provisioning
delay 0, hosts on): how long it takes, and where the time goes.

1. Scale. For each N: N one-host v4-8 jobs (`setup: sleep 5`, a `sleep` program) are started and
   run; then every slice is preempted at once and `tpujob requeue --settle 60` runs back to back, as cron
   would without its interval, until every job runs again on a new slice. Printed: the seconds
   from the preemption until all run again, the sweeps used, t(N)/t(1), and per job (medians)
   the seconds from the preemption to each phase the store's events record.
2. Phases of a real program. One job per variant runs the bundled runtime (tiny preset, a
   checkpoint every 10 steps, its run dir in the emulator's Cloud Storage) after a 5-second setup
   that builds a 16 MB directory: without a setup cache, and with one (the first attempt stores
   it, the second, on a new slice, unpacks it). After its first checkpoint the slice is
   preempted; printed are the seconds from the preemption to: seen, slice requested, READY,
   setup done, program started (the store's events), checkpoint restored (the heartbeat's
   `resumed_from` with the phase past restoring, polled), first new step (the heartbeat's step
   past it: within its 1-second interval), and
   READY -> first new step against the unpack time the cache reported.

The jobs set `min_run_seconds: 0`: they ran seconds before the preemption, which would
otherwise be a flap (in the field an attempt runs hours).

    .venv/bin/python scripts/bench_recovery.py [--sizes 1,10,50] [--workers 16] [--no-phases]
        [--provisioning-delay S]

`--provisioning-delay S` makes each node take S seconds from its create to READY, as Google's
do (minutes): with 0 the emulator's creates are instant and t(N) measures mostly 2 cores
running N emulated VMs; with S > 0 it shows what waiting for creates costs a sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_requeue import ZONE, fresh

SPEC = f"""\
name: recovery
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}
setup: sleep 5
requeue: {{min_run_seconds: 0}}
run: {{command: 'sleep 3600'}}
"""

BUCKET = "bench-recovery"
RUNTIME_SPEC = """\
name: phases
tpu: {{accelerator: v4-8, zone: {zone}, queued: false}}
run_dir: gs://{bucket}/{token}
requeue: {{min_run_seconds: 0, backoff_seconds: 0}}
setup:
  run: |
    # {token}
    sleep 5
    mkdir -p ~/bench-env && head -c 16000000 /dev/urandom > ~/bench-env/blob
{cache}run:
  runtime: {{model: tiny, steps: 100000, batch_size: 8, seq_len: 64, checkpoint_every: 10, keep: 2,
            log_every: 1, heartbeat_every_s: 1}}
"""
PHASES = ("seen", "slice requested", "READY", "setup done", "program started")
RUNTIME_PHASES = PHASES + ("checkpoint restored", "first new step")


def all_running(ctx, attempt: int) -> bool:
    return all(j.state == "RUNNING" and j.attempt == attempt for j in ctx.store.list_jobs())


# As the cron line runs it (service/cron.py): the sweep follows the setups it starts. 60 s:
# the 80% of a one-minute cron interval, rounded up.
SETTLE = "60"


def requeue() -> None:
    done = subprocess.run([sys.executable, "-m", "tpujob.cli.main", "requeue", "--settle", SETTLE],
                          capture_output=True, text=True)
    if done.returncode != 0 or "  job " in done.stderr:
        raise SystemExit(f"requeue failed ({done.returncode}): {done.stderr.strip()}")


def sweep_until(ctx, rec, done, limit: float = 300, what: str = "the jobs") -> None:
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not get there in {limit:.0f} s")
        rec.sweep()
        time.sleep(0.2)


def phases_of(ctx, job_id: int, since: float) -> dict[str, float]:
    """Seconds from `since` (the preemption, wall clock) to each phase the job's events record."""
    out: dict[str, float] = {}
    for event in ctx.store.events(job_id):
        if event.at < since:
            continue
        name = None
        if event.to_state == "RECOVERING" or (event.to_state == "FAILED"):
            name = "seen"
        elif event.kind == "slice" and event.message.startswith("requested"):
            name = "slice requested"
        elif event.to_state == "SETTING_UP":
            name = "READY"
        elif event.kind == "setup" and event.message.startswith("setup done"):
            name = "setup done"
            unpacked = re.search(r"unpacked in ([0-9.]+) s", event.message)
            if unpacked:
                out.setdefault("unpack", float(unpacked.group(1)))
            out.setdefault("cache hit", 1.0 if "setup cache: hit" in event.message else 0.0)
        elif event.to_state == "RUNNING":
            name = "program started"
        if name is not None:
            out.setdefault(name, event.at - since)
    return out


def preempt_all(ctx, process) -> float:
    client = process.client()
    refs = [f"projects/bench/locations/{ZONE}/nodes/{ctx.store.current_attempt(j.id).slice_name}"
            for j in ctx.store.list_jobs()]
    preempted_at = time.time()
    with ThreadPoolExecutor(max_workers=16) as pool:  # at once, as a zone-wide preemption
        list(pool.map(lambda ref: client.preempt(ref, grace_seconds=0), refs))
    return preempted_at


def measure(size: int, provisioning_delay: float = 0.0) -> dict:
    from tpujob.service import jobs

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ctx, rec, process = fresh(directory, hosts=True, provisioning_delay=provisioning_delay)
        try:
            path = directory / "recovery.yaml"
            path.write_text(SPEC)
            for _ in range(size):
                jobs.record(ctx, str(path))
            sweep_until(ctx, rec, lambda: all_running(ctx, 1))
            preempted_wall = preempt_all(ctx, process)
            preempted_at = time.monotonic()
            sweeps = 0
            while not all_running(ctx, 2):
                if time.monotonic() - preempted_at > 600:
                    raise SystemExit(f"{size} jobs: not all running again after {sweeps} sweeps")
                requeue()
                sweeps += 1
            seconds = time.monotonic() - preempted_at
            per_job = [phases_of(ctx, j.id, preempted_wall) for j in ctx.store.list_jobs()]
            return dict(jobs=size, seconds=seconds, sweeps=sweeps, phases=_medians(per_job, PHASES))
        finally:
            process.stop(grace=60)  # 50 hosts take a while to tear down; SIGKILL would orphan them


def _medians(rows: list[dict[str, float]], names) -> dict[str, float | None]:
    return {n: (statistics.median(v) if (v := [r[n] for r in rows if n in r]) else None) for n in names}


class RunDirWatch:
    """Polls one job's heartbeat in the emulator's Cloud Storage (rewritten every second, by
    rename: metrics.jsonl, appended, reaches the bucket only when gcsfuse flushes it): when, by
    its own `time`, attempt 2 first said it had restored its checkpoint and moved on to training,
    and first reported a step past the one it restored."""

    def __init__(self, bucket, prefix: str):
        self.blob = bucket.blob(f"{prefix}/heartbeat")
        self.restored: float | None = None
        self.first_step: float | None = None
        self.startup: dict | None = None  # the runtime's own account of its start (heartbeat)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.2) and (self.first_step is None or self.startup is None):
            try:
                beat = json.loads(self.blob.download_as_bytes())
            except Exception:  # noqa: BLE001 - not there yet, or replaced under the read
                continue
            resumed = beat.get("resumed_from")
            if str(beat.get("attempt")) != "2" or resumed is None:
                continue
            if self.restored is None and beat.get("phase") not in ("starting", "restoring"):
                self.restored = float(beat["time"])
            if (beat.get("step") or 0) > resumed:
                self.first_step = self.first_step or float(beat["time"])
                self.startup = beat.get("startup")
                self.restored = self.restored or self.first_step

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)


def measure_runtime(cached: bool) -> dict:
    from tpujob.clients import make_storage
    from tpujob.service import jobs

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ctx, rec, process = fresh(directory, hosts=True)
        try:
            gcs = make_storage(ctx.settings)
            bucket = gcs.lookup_bucket(BUCKET) or gcs.create_bucket(BUCKET)
            token = uuid.uuid4().hex[:8]
            path = directory / "phases.yaml"
            path.write_text(RUNTIME_SPEC.format(zone=ZONE, bucket=BUCKET, token=token,
                                                cache="  cache: [bench-env]\n" if cached else ""))
            job, _ = jobs.record(ctx, str(path))
            prefix = f"{token}/{job.id:06d}"
            # A committed checkpoint: the runtime waits for one save to finish before the next
            # begins (and on gcsfuse, Orbax's rename of its temporary directory is a copy, object
            # by object): past step 25, the checkpoint of step 10 is whole.
            sweep_until(ctx, rec, lambda: all_running(ctx, 1) and _step(bucket, prefix) >= 25, limit=900,
                        what="the first attempt's checkpoint")
            watch = RunDirWatch(bucket, prefix).start()
            preempted_wall = preempt_all(ctx, process)
            while not all_running(ctx, 2):
                if time.time() - preempted_wall > 600:
                    raise SystemExit("the runtime job did not run again")
                requeue()
            phases = phases_of(ctx, job.id, preempted_wall)
            deadline = time.time() + 300
            while (watch.first_step is None or watch.startup is None) and time.time() < deadline:
                time.sleep(0.5)
            watch.stop()
            if watch.restored is not None:
                phases["checkpoint restored"] = watch.restored - preempted_wall
            if watch.first_step is not None:
                phases["first new step"] = watch.first_step - preempted_wall
            return dict(cached=cached, phases=phases, startup=watch.startup)
        finally:
            process.stop(grace=60)  # 50 hosts take a while to tear down; SIGKILL would orphan them


def _step(bucket, prefix: str) -> int:
    try:
        return int(json.loads(bucket.blob(f"{prefix}/heartbeat").download_as_bytes()).get("step") or 0)
    except Exception:  # noqa: BLE001 - no heartbeat yet, or replaced under the read
        return 0


def _cell(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50", help="job counts (comma-separated; the first is t(1)'s; "
                        "empty: the phases only)")
    parser.add_argument("--workers", type=int, default=None, help="TPUJOB_SWEEP_WORKERS (default: the sweep's, 16)")
    parser.add_argument("--no-phases", action="store_true", help="skip the bundled runtime's phases")
    parser.add_argument("--provisioning-delay", type=float, default=0.0,
                        help="seconds a node takes from its create to READY (Google's take minutes; default 0)")
    args = parser.parse_args()
    if args.workers is not None:
        os.environ["TPUJOB_SWEEP_WORKERS"] = str(args.workers)
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    rows = [measure(int(n), args.provisioning_delay) for n in args.sizes.split(",") if n]
    if rows:
        print(f"a node READY {args.provisioning_delay:g} s after its create")
        _print_scale(rows)
    if not args.no_phases:
        _print_phases()
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


def _print_scale(rows: list[dict]) -> None:
    base = rows[0]["seconds"]
    print(f"workers {os.environ.get('TPUJOB_SWEEP_WORKERS', 'default (16)')}; sweeps are "
          f"`tpujob requeue --settle {SETTLE}` processes, back to back; `setup: sleep 5`, program `sleep`")
    head = "".join(f" {p:>16}" for p in PHASES)
    print(f"{'jobs':>5} {'all running s':>14} {'sweeps':>7} {'t(N)/t(' + str(rows[0]['jobs']) + ')':>9}  "
          f"median s from the preemption to:{head}")
    for r in rows:
        cells = "".join(f" {_cell(r['phases'][p]):>16}" for p in PHASES)
        print(f"{r['jobs']:>5} {r['seconds']:>14.1f} {r['sweeps']:>7} {r['seconds'] / base:>9.2f}  "
              f"{'':>32}{cells}")
    sys.stdout.flush()


def _print_phases() -> None:
    print("\nthe bundled runtime (tiny), one job per row: seconds from the preemption to each phase")
    print(f"{'setup cache':>12}" + "".join(f" {p:>20}" for p in RUNTIME_PHASES)
          + f" {'READY->first step':>18} {'unpack s':>9}")
    startups = []
    for cached in (False, True):
        measured = measure_runtime(cached)
        got = measured["phases"]
        label = ("hit" if got.get("cache hit") else "miss") if cached else "none"
        span = (got["first new step"] - got["READY"]) if "first new step" in got and "READY" in got else None
        print(f"{label:>12}" + "".join(f" {_cell(got.get(p)):>20}" for p in RUNTIME_PHASES)
              + f" {_cell(span):>18} {_cell(got.get('unpack')):>9}")
        startups.append((label, measured["startup"]))
        sys.stdout.flush()
    print("the runtime's start-up, by its heartbeat: seconds from the process's start")
    for label, st in startups:
        print(f"{label:>12} " + ("-" if not st else
              f"first step {st['first_step_s']}: restore {st['restore_s']}, compile {st['compile_s']} "
              f"(compile cache {st['compile_cache']})"))


if __name__ == "__main__":
    main()

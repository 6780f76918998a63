"""Benchmark of the requeue sweep against a fresh emulator of its own (provisioning delay 0).

Two measurements, labelled for what they are:
- running (hosts on, 1-host v4-8 jobs running `sleep`): a steady sweep lists each zone once and
  checks every RUNNING job's program over SSH; then one job is preempted and sweeps run (over
  every job, as cron would) until its program runs again on the new slice.
- waiting (hosts off, queued resources in a stocked-out zone): a steady sweep with no SSH at all,
  the cost of observation alone, for sizes where hosts would not fit on this machine.

    .venv/bin/python scripts/bench_requeue.py [--running 10,100,200] [--waiting 10,100,500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ZONE = "us-central2-b"
SPEC = """\
name: bench
tpu: {{accelerator: v4-8, zone: {zone}, queued: {queued}}}
requeue: {{backoff_seconds: 0}}
run: {{command: 'echo "$TPUJOB_ATTEMPT" >> /mnt/ran; sleep 3600'}}
"""


def fresh(directory: Path, hosts: bool, provisioning_delay: float = 0.0):
    """A store and an emulator of their own under `directory` (a node READY
    `provisioning_delay` s after its create)."""
    os.environ["TPUJOB_HOME"] = str(directory / "home")
    os.environ["TPUJOB_EMULATOR_DIR"] = str(directory / "emulator")
    os.environ["TPUJOB_PROJECT"] = "bench"
    from tpujob.emulator import process
    from tpujob.service.context import Context
    from tpujob.service.keep_alive import reconciler

    process.start(provisioning_delay=provisioning_delay, hosts=hosts)
    ctx = Context.load()
    return ctx, reconciler(ctx), process


def record(ctx, directory: Path, count: int, zone: str, queued: bool) -> None:
    from tpujob.service import jobs

    path = directory / "bench.yaml"
    path.write_text(SPEC.format(zone=zone, queued="true" if queued else "false"))
    for _ in range(count):
        jobs.record(ctx, str(path))


def until(ctx, rec, done, limit=60) -> tuple[float, int]:
    started = time.monotonic()
    for n in range(1, limit + 1):
        rec.sweep()
        if done(ctx.store.list_jobs()):
            return time.monotonic() - started, n
    raise SystemExit("the jobs never settled")


def steady(rec, sweeps=3) -> tuple[float, int]:
    reports = [rec.sweep() for _ in range(sweeps)]
    return statistics.median(r.seconds for r in reports), int(statistics.median(r.api_calls for r in reports))


def running(size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ctx, rec, process = fresh(directory, hosts=True)
        try:
            record(ctx, directory, size, ZONE, queued=False)
            start_s, start_sweeps = until(ctx, rec, lambda jobs: all(j.state == "RUNNING" for j in jobs))
            sweep_s, calls = steady(rec)
            victim = ctx.store.list_jobs()[0].id
            node = ctx.store.current_attempt(victim).slice_name
            client = process.client()
            client.preempt(f"projects/bench/locations/{ZONE}/nodes/{node}")
            preempted_at = time.monotonic()
            sweeps, deadline = 0, preempted_at + 300
            while True:
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {victim} was not running again 300 s after its preemption")
                rec.sweep()
                sweeps += 1
                attempt = ctx.store.current_attempt(victim)
                if attempt.number == 2 and ctx.store.get(victim).state == "RUNNING":
                    ref = f"projects/bench/locations/{ZONE}/nodes/{attempt.slice_name}"
                    ran = Path(client.hosts(ref)[0]["root"]) / "mnt" / "ran"
                    while not ran.exists():
                        if time.monotonic() > deadline:
                            raise SystemExit(f"the program of job {victim} never started on the new slice")
                        time.sleep(0.01)
                    break
            recovery = time.monotonic() - preempted_at
            return dict(mode="running", jobs=size, api_calls=calls, sweep_s=sweep_s,
                        start=f"{start_s:.1f} s / {start_sweeps} sweeps",
                        recovery=f"{recovery:.1f} s / {sweeps} sweeps")
        finally:
            process.stop(grace=5)


def waiting(size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ctx, rec, process = fresh(directory, hosts=False)
        try:
            process.client().stockout(ZONE)
            record(ctx, directory, size, ZONE, queued=True)
            start_s, start_sweeps = until(ctx, rec, lambda jobs: all(j.state == "PROVISIONING" for j in jobs))
            sweep_s, calls = steady(rec)
            return dict(mode="waiting", jobs=size, api_calls=calls, sweep_s=sweep_s,
                        start=f"{start_s:.1f} s / {start_sweeps} sweeps", recovery="-")
        finally:
            process.stop(grace=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", default="10,100,200", help="sizes with hosts on (comma-separated)")
    parser.add_argument("--waiting", default="10,100,500", help="sizes with hosts off, jobs queued")
    args = parser.parse_args()
    sizes = lambda text: [int(s) for s in text.split(",") if s]  # noqa: E731
    rows = [running(n) for n in sizes(args.running)] + [waiting(n) for n in sizes(args.waiting)]
    print(f"{'mode':<8} {'jobs':>5} {'API calls/sweep':>16} {'sweep s':>8}  {'to start all':<20} "
          f"{'preempt -> running again':<24}")
    for r in rows:
        print(f"{r['mode']:<8} {r['jobs']:>5} {r['api_calls']:>16} {r['sweep_s']:>8.2f}  {r['start']:<20} "
              f"{r['recovery']:<24}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

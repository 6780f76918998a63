"""Benchmark of recovery after a preemption of many jobs at once, against a fresh emulator of its
own (provisioning delay 0, hosts on).

For each N: N one-host v4-8 jobs (`setup: sleep 5`, the default backoff) are started and run;
then every slice is preempted at once and `tpujob requeue` runs back to back, as cron would
without its interval, until every job runs again on a new slice. Printed: the seconds from the
preemption until all run again, the sweeps used, and t(N)/t(1). The jobs set
`min_run_seconds: 0`: they ran seconds before the preemption, which would otherwise be a flap
(in the field an attempt runs hours).

    .venv/bin/python scripts/bench_recovery.py [--sizes 1,10,50] [--workers 16]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_requeue import ZONE, fresh  # noqa: E402

SPEC = """\
name: recovery
tpu: {accelerator: v4-8, zone: %s, queued: false}
setup: sleep 5
requeue: {min_run_seconds: 0}
run: {command: 'sleep 3600'}
""" % ZONE


def all_running(ctx, attempt: int) -> bool:
    return all(j.state == "RUNNING" and j.attempt == attempt for j in ctx.store.list_jobs())


def requeue() -> None:
    done = subprocess.run([sys.executable, "-m", "tpujob.cli.main", "requeue"], capture_output=True, text=True)
    if done.returncode != 0 or "  job " in done.stderr:
        raise SystemExit(f"requeue failed ({done.returncode}): {done.stderr.strip()}")


def measure(size: int) -> dict:
    from tpujob.service import jobs

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ctx, rec, process = fresh(directory, hosts=True)
        try:
            path = directory / "recovery.yaml"
            path.write_text(SPEC)
            for _ in range(size):
                jobs.record(ctx, str(path))
            for _ in range(10):
                rec.sweep()
                if all_running(ctx, 1):
                    break
            else:
                raise SystemExit("the jobs never all ran")
            client = process.client()
            refs = [f"projects/bench/locations/{ZONE}/nodes/{ctx.store.current_attempt(j.id).slice_name}"
                    for j in ctx.store.list_jobs()]
            with ThreadPoolExecutor(max_workers=16) as pool:  # at once, as a zone-wide preemption
                list(pool.map(lambda ref: client.preempt(ref, grace_seconds=0), refs))
            preempted_at = time.monotonic()
            sweeps = 0
            while not all_running(ctx, 2):
                if sweeps >= 20:
                    raise SystemExit(f"{size} jobs: not all running again after {sweeps} sweeps")
                requeue()
                sweeps += 1
            return dict(jobs=size, seconds=time.monotonic() - preempted_at, sweeps=sweeps)
        finally:
            process.stop(grace=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50", help="job counts (comma-separated; the first is t(1)'s)")
    parser.add_argument("--workers", type=int, default=None, help="TPUJOB_SWEEP_WORKERS (default: the sweep's, 16)")
    args = parser.parse_args()
    if args.workers is not None:
        os.environ["TPUJOB_SWEEP_WORKERS"] = str(args.workers)
    rows = [measure(int(n)) for n in args.sizes.split(",") if n]
    base = rows[0]["seconds"]
    print(f"workers {os.environ.get('TPUJOB_SWEEP_WORKERS', 'default (16)')}; sweeps are `tpujob requeue` "
          "processes, back to back")
    print(f"{'jobs':>5} {'preempt -> all running s':>25} {'sweeps':>7} {'t(N)/t(' + str(rows[0]['jobs']) + ')':>9}")
    for r in rows:
        print(f"{r['jobs']:>5} {r['seconds']:>25.1f} {r['sweeps']:>7} {r['seconds'] / base:>9.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

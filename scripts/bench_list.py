"""How fast `tpujob list` answers with a big store, as a whole process (start-up included).

Fills a store in a temporary TPUJOB_HOME with --jobs jobs (bulk SQL insert into the migrated
schema), then runs each command --runs times and prints the median wall time:
`python -c pass` (the interpreter's floor), `python -c 'import typer, sqlmodel'` (the import floor:
what any command of a typer + sqlmodel CLI pays before its own work), `tpujob --help`,
`tpujob list`, `tpujob list --all` and `tpujob list --all --json`, and the ratios of `list` and
`list --all --json` to the import floor (issue 12's goal: <= 1.2 for both). Commands run
interleaved, one round at a time, so a change in the machine's load touches them all alike.

    .venv/bin/python scripts/bench_list.py [--jobs 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Most jobs of a long-lived store have ended; `list` (without --all) shows the active ones.
STATES = ["RUNNING"] * 2 + ["PENDING", "RECOVERING"] + ["SUCCEEDED"] * 4 + ["FAILED", "DELETED"]


def fill(home: Path, jobs: int) -> None:
    os.environ["TPUJOB_HOME"] = str(home)
    from tpujob.settings import load
    from tpujob.store.db import engine_for
    from tpujob.store.models import Job

    engine = engine_for(load().database_url)
    now = time.time()
    rows = [{
        "name": f"job-{i}", "state": STATES[i % len(STATES)],
        "end_reason": "preemption_budget" if STATES[i % len(STATES)] == "FAILED" else None,
        "spec_yaml": "name: job\n", "spec_json": "{}", "accelerator": "v4-32", "zone": "us-central2-b",
        "project": "bench", "cloud": "local", "attempt": i % 5, "preemptions": i % 3, "failures": 0,
        "nan_restarts": 0, "keep_slice": False, "created_at": now - i * 60, "updated_at": now,
    } for i in range(jobs)]
    with engine.begin() as conn:
        conn.execute(Job.__table__.insert(), rows)
    engine.dispose()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_once(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    script = Path(sys.executable).parent / "tpujob"
    tpujob = [str(script)] if script.exists() else [sys.executable, "-m", "tpujob.cli.main"]
    home = Path(tempfile.mkdtemp(prefix="tpujob-bench-"))
    try:
        start = time.perf_counter()
        fill(home, args.jobs)
        active = sum(1 for i in range(args.jobs) if STATES[i % len(STATES)] in ("RUNNING", "PENDING", "RECOVERING"))
        print(f"store: {args.jobs} jobs ({active} active) filled in {time.perf_counter() - start:.2f} s; "
              f"median of {args.runs} runs, whole process; load average {_load()} at the start")
        env = {**os.environ, "TPUJOB_HOME": str(home)}
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import typer, sqlmodel": [sys.executable, "-c", "import typer, sqlmodel"],
            "tpujob --help": tpujob + ["--help"],
            "tpujob list": tpujob + ["list"],
            "tpujob list --all": tpujob + ["list", "--all"],
            "tpujob list --all --json": tpujob + ["list", "--all", "--json"],
        }
        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(args.runs):
            for label, argv in commands.items():
                times[label].append(run_once(argv, env))
        median = {label: statistics.median(ts) for label, ts in times.items()}
        for label in commands:
            print(f"  {label:<26} {median[label] * 1000:8.0f} ms")
        floor = median["import typer, sqlmodel"]
        for label in ("tpujob list", "tpujob list --all --json"):
            print(f"  {label + ' / import floor':<40} {median[label] / floor:5.2f}x")
        print(f"load average {_load()} at the end ({os.cpu_count()} cores)")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Read a suite run's timeline (`TPUJOB_TEST_TIMELINE=DIR pytest ...`, tests/conftest.py) and
print where the run's time went: each worker's busy share, the tests that ended last, the
longest tests with when they started, and, where the timeline has them (a worker's cgroup), the
CPU-seconds each test and each file cost. Usage: scripts/suite_timeline.py DIR"""

from __future__ import annotations

import sys
from pathlib import Path


def main(folder: Path) -> None:
    spans: list[tuple[str, float, float, str]] = []
    cpu: dict[str, float] = {}  # node id -> CPU-s, where the timeline has the worker's counter
    logs = sorted(folder.glob("*.txt"))
    if any(log.stem.startswith("gw") for log in logs):  # xdist's controller repeats its workers' tests
        logs = [log for log in logs if log.stem != "main"]
    for log in logs:
        started: dict[str, tuple[float, str]] = {}
        for line in log.read_text().splitlines():
            when, what, rest = line.split(" ", 2)
            nodeid, _, used = rest.partition("\t")  # node ids hold spaces, never a tab
            if what == "start":
                started[nodeid] = (float(when), used)
            elif nodeid in started:
                began, used_then = started.pop(nodeid)
                spans.append((log.stem, began, float(when), nodeid))
                if used and used_then:
                    cpu[nodeid] = float(used) - float(used_then)
    if not spans:
        raise SystemExit(f"no timeline under {folder}")
    t0 = min(s[1] for s in spans)
    t1 = max(s[2] for s in spans)
    print(f"{len(spans)} tests, {t1 - t0:.0f} s from the first start to the last end")
    for worker in sorted({s[0] for s in spans}):
        mine = [s for s in spans if s[0] == worker]
        busy = sum(e - b for _, b, e, _ in mine)
        last = max(e for _, _, e, _ in mine) - t0
        print(f"  {worker}: {len(mine)} tests, busy {busy:.0f} s, last end at {last:.0f} s")
    print("ended last:")
    for worker, b, e, nodeid in sorted(spans, key=lambda s: s[2])[-8:]:
        print(f"  {b - t0:6.0f} -> {e - t0:6.0f} s  {worker}  {nodeid}")
    print("longest:")
    for worker, b, e, nodeid in sorted(spans, key=lambda s: s[1] - s[2])[:15]:
        print(f"  {e - b:6.0f} s from {b - t0:6.0f} s  {worker}  {nodeid}")
    if cpu:
        by_file: dict[str, float] = {}
        for nodeid, seconds in cpu.items():
            path = nodeid.split("::")[0]
            by_file[path] = by_file.get(path, 0.0) + seconds
        print(f"CPU-s, {sum(cpu.values()):.0f} in all; the costliest tests:")
        for nodeid, seconds in sorted(cpu.items(), key=lambda c: -c[1])[:15]:
            print(f"  {seconds:6.1f}  {nodeid}")
        print("by file:")
        for path, seconds in sorted(by_file.items(), key=lambda c: -c[1])[:15]:
            print(f"  {seconds:6.1f}  {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

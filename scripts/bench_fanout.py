"""Time a trivial command on 1, 8 and 32 emulated hosts; a parallel fan-out keeps 32/1 near 1.

Run as root (hosts are mount namespaces):  .venv/bin/python scripts/bench_fanout.py
"cold" includes the SSH handshakes, "warm" reuses the open connections (the median of 5 runs).
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import tempfile
import time

from tpujob.emulator.machines.slice import SliceMachines
from tpujob.hosts.fanout import Host, HostGroup, ensure_ok
from tpujob.hosts.keys import load_key, public_key_line


def bench(num_hosts: int, home: pathlib.Path, block: int, port: int) -> tuple[float, float]:
    machines = SliceMachines(home / f"node-{num_hosts}", f"bench-{num_hosts}", num_hosts,
                             [public_key_line(home)], block, port)
    try:
        hosts = [Host(e.index, e.ip, e.ssh_port, (e.host_key,)) for e in machines.start()]
        with HostGroup(hosts, "tpujob", load_key(home)) as group:
            start = time.perf_counter()
            ensure_ok(group.run("true"), "true")
            cold = time.perf_counter() - start
            warm = []
            for _ in range(5):
                start = time.perf_counter()
                ensure_ok(group.run("true"), "true")
                warm.append(time.perf_counter() - start)
        return cold, statistics.median(warm)
    finally:
        machines.stop()


def main() -> int:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 2222
    with tempfile.TemporaryDirectory() as tmp:
        home = pathlib.Path(tmp)
        figures = {n: bench(n, home, 59000 + n, port) for n in (1, 8, 32)}
    print(f"{'hosts':>5}  {'cold s':>7}  {'warm s':>7}")
    for n, (cold, warm) in figures.items():
        print(f"{n:>5}  {cold:7.3f}  {warm:7.3f}")
    print(f"ratio 32/1: cold {figures[32][0] / figures[1][0]:.2f}, "
          f"warm {figures[32][1] / figures[1][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

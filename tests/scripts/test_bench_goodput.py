"""scripts/bench_goodput.py: a simulated week over tpujob's own decision code. A small run (one
seed, two days): the shape of what it prints and that its numbers agree with each other."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_goodput.py"
POLICY = re.compile(r"  (static|auto|oracle) +([\d.]+) training h/\$  (\d+) jobs  trained (\d+)h  paid (\d+)h  "
                    r"interval (\d+)m  ledger off wall by at most ([\d.]+)%")
ZONE = re.compile(r"    (static|auto|oracle) +\S+: (\d+) attempts \((\d+) stockouts, (\d+) interruptions\)  "
                  r"paid (\d+)h = restart (\d+)h \+ checkpoint (\d+)h \+ lost (\d+)h \+ kept (\d+)h")


def bench(*args: str) -> str:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=True).stdout


def test_the_bench_prints_its_ratios_and_the_ledgers_add_up():
    out = bench("--seeds", "1", "--days", "2", "--detail")
    lines = out.strip().splitlines()
    last = re.fullmatch(r"goodput per dollar: auto/static (\d+\.\d\d), auto/oracle (\d+\.\d\d)", lines[-1])
    assert last, lines[-1]
    policies = {m[1]: m for m in POLICY.finditer(out)}
    assert sorted(policies) == ["auto", "oracle", "static"]
    for name, m in policies.items():
        assert float(m[7]) < 1.0  # every job's ledger buckets within 1 % of its wall time
        assert int(m[3]) > 0 and 0 < int(m[4]) <= int(m[5])  # trained no more than it paid for
        assert float(m[2]) <= 1 / 9.6 + 1e-4  # at most every paid hour trained, at 9.60 $/h
        zones = [z for z in ZONE.finditer(out) if z[1] == name]
        assert zones, name
        # where the paid hours went, zone by zone, adds up to the policy's paid and trained hours
        assert abs(sum(int(z[5]) for z in zones) - int(m[5])) <= len(zones)
        assert abs(sum(int(z[9]) for z in zones) - int(m[4])) <= len(zones)
        for z in zones:
            parts = sum(int(z[i]) for i in (6, 7, 8, 9))
            assert abs(parts - int(z[5])) <= 2, z[0]  # each hour rounded on its own
            assert int(z[3]) + int(z[4]) <= int(z[2])
    static, auto, oracle = (float(policies[p][2]) for p in ("static", "auto", "oracle"))
    # the last line is the ratio of the printed rates (one seed: the same run), to their rounding
    assert abs(float(last[1]) - auto / static) <= 0.01
    assert abs(float(last[2]) - auto / oracle) <= 0.01
    assert re.search(r"  seed 1: auto/static \d+\.\d\d, auto/oracle \d+\.\d\d, oracle/static \d+\.\d\d", out)
    assert "auto    first zone at create, as it changed: 0h us-east5-a" in out  # a cold start keeps the spec's order


def test_the_bench_is_the_same_run_for_the_same_seed():
    assert bench("--seeds", "2", "--days", "1") == bench("--seeds", "2", "--days", "1")

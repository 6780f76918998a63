"""scripts/bench_goodput.py: a simulated week over tpujob's own decision code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_goodput.py"


def test_the_bench_prints_its_ratios_and_the_ledgers_add_up():
    out = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "1"], capture_output=True, text=True,
                         check=True).stdout
    lines = out.strip().splitlines()
    assert re.fullmatch(r"goodput per dollar: auto/static \d+\.\d\d, auto/oracle \d+\.\d\d", lines[-1])
    gaps = [float(g) for g in re.findall(r"ledger off wall by at most ([\d.]+)%", out)]
    assert len(gaps) == 3 and max(gaps) < 1.0  # every job's buckets within 1 % of its wall time
    to_oracle = float(lines[-1].rsplit(" ", 1)[1])
    assert 0.5 < to_oracle <= 1.0  # the oracle knows the market: the seeded week never has auto beat it

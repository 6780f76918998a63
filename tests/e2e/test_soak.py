"""The short soak CI runs: two emulated minutes of preemptions, stockouts, API faults, dead hosts
and sweeps SIGKILLed at their crash points (scripts/soak.py, fixed seed), then every invariant
checked: no job stuck mid-way, no slice or queued resource without its live attempt, `tpujob gc`
finds no orphan, events in order and every move legal, no step lost beyond what the preemption
allows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_two_minutes_of_chaos_leave_every_invariant_held():
    done = subprocess.run([sys.executable, "scripts/soak.py", "--minutes", "2", "--seed", "1", "--jobs", "4"],
                          cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert ", 0 violated" in done.stdout
    assert "faults injected: 0 " not in done.stdout and "preemptions: 0 " not in done.stdout

"""The tuning knobs (TPUJOB_SWEEP_WORKERS, ...): one table in tpujob/settings.py (`KNOBS`), one
reader (`knob`), and docs/settings.md's table generated from it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tpujob import settings
from tpujob.errors import ConfigError
from tpujob.settings import KNOBS, knob

ROOT = Path(__file__).resolve().parents[1]


def test_docs_settings_md_holds_the_table_knobs_makes():
    text = (ROOT / "docs" / "settings.md").read_text()
    table = text.split(settings.KNOBS_BEGIN, 1)[1].split(settings.KNOBS_END, 1)[0]
    assert settings.KNOBS_BEGIN + table + settings.KNOBS_END == settings.knobs_markdown(), \
        "docs/settings.md is out of step with tpujob/settings.py KNOBS: run scripts/docs_tables"
    for k in KNOBS.values():
        assert f"| `{k.variable}` | {k.default:g} | {k.takes} |" in text


@pytest.mark.parametrize(("name", "default", "takes"), [
    ("SWEEP_WORKERS", 16, "a whole number from 1 to 256"),
    ("LEASE_SECONDS", 90, "seconds from 1 to 604800"),
    ("QUEUE_FOLLOW_SECONDS", 30, "seconds from 0 to 86400"),
    ("NOTIFY_TIMEOUT", 5, "seconds more than 0, up to 120"),
    ("CLOCK_SKEW_SECONDS", 0, "seconds from -86400 to 86400"),
])
def test_each_knob_keeps_its_name_default_and_bounds(monkeypatch, name, default, takes):
    monkeypatch.delenv(f"TPUJOB_{name}", raising=False)
    assert knob(name) == default
    k = KNOBS[name]
    monkeypatch.setenv(f"TPUJOB_{name}", f" {k.high:g} ")
    assert knob(name) == k.high
    if not k.above:  # e.g. TPUJOB_QUEUE_FOLLOW_SECONDS=0: return once the job is seen waiting
        monkeypatch.setenv(f"TPUJOB_{name}", f"{k.low:g}")
        assert knob(name) == k.low
    for bad in ("soon", f"{k.high + 1:g}", f"{k.low - 1:g}", *([f"{k.low:g}"] if k.above else [])):
        monkeypatch.setenv(f"TPUJOB_{name}", bad)
        with pytest.raises(ConfigError) as err:
            knob(name)
        assert str(err.value) == f"TPUJOB_{name} must be {takes}, got {bad!r}"


def test_cron_carries_every_knob_a_sweep_reads(tpujob_home, monkeypatch):
    from tpujob.service import cron

    values = {"TPUJOB_SWEEP_WORKERS": "4", "TPUJOB_LEASE_SECONDS": "900", "TPUJOB_NOTIFY_TIMEOUT": "20"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    words = shlex.split(cron.entry("5m", python="/usr/bin/python3").command)
    carried = dict(w.split("=", 1) for w in words[:words.index("/usr/bin/flock")])
    assert {key: carried.get(key) for key in values} == values


def test_no_module_but_settings_reads_a_knob_from_the_environment():
    knob_names = "|".join(KNOBS)
    reads = re.compile(rf"environ(?:\.get)?[\[(]\s*f?[\"']TPUJOB_(?:{knob_names})|TPUJOB_{{name}}")
    found = [f"{path.relative_to(ROOT)}:{n}"
             for path in sorted((ROOT / "tpujob").rglob("*.py")) if path.name != "settings.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if reads.search(line)]
    assert found == []

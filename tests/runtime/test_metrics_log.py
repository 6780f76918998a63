"""metrics.jsonl reaches a gcsfuse run dir only when its file is closed or fsynced (gcsfuse
uploads on close/fsync): the runtime closes and reopens it at most every `sync_every_s`, so a
reader (the dashboard's curves) sees the run while it goes, not only after the attempt."""

from __future__ import annotations

import json

from tpujob.runtime import metrics


def test_metrics_are_closed_and_reopened_at_most_every_interval(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: clock[0])
    log = metrics.MetricsLog(tmp_path, enabled=True, sync_every_s=10.0)
    handles = []
    for step, at in ((1, 1004.0), (2, 1009.9), (3, 1010.0), (4, 1011.0), (5, 1020.0), (6, 1021.0)):
        clock[0] = at
        log.write({"step": step})
        handles.append(log._file)
    closed = [h for h in dict.fromkeys(handles) if h.closed]
    assert len(dict.fromkeys(handles)) == 3 and len(closed) == 2  # handed over after steps 3 and 5
    log.close()
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        [1, 2, 3, 4, 5, 6]


def test_hosts_other_than_0_write_nothing(tmp_path):
    log = metrics.MetricsLog(tmp_path, enabled=False)
    log.write({"step": 1})
    log.close()
    assert not (tmp_path / "metrics.jsonl").exists()

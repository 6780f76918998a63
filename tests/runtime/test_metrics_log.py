"""metrics.jsonl reaches a gcsfuse run dir only when fsynced (gcsfuse uploads on close/fsync):
the runtime syncs it at most every `sync_every_s`, so a reader sees the run while it goes."""

from __future__ import annotations

import json

from tpujob.runtime import metrics


def test_metrics_are_fsynced_at_most_every_interval(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(metrics.os, "fsync", lambda fd: synced.append(fd))
    clock = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: clock[0])
    log = metrics.MetricsLog(tmp_path, enabled=True, sync_every_s=10.0)
    for step, at in ((1, 1000.0), (2, 1004.0), (3, 1009.9), (4, 1010.0), (5, 1011.0), (6, 1020.0)):
        clock[0] = at
        log.write({"step": step})
    log.close()
    assert len(synced) == 3  # steps 1, 4 and 6: the first write, then each 10 s
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        [1, 2, 3, 4, 5, 6]


def test_hosts_other_than_0_write_nothing(tmp_path):
    log = metrics.MetricsLog(tmp_path, enabled=False)
    log.write({"step": 1})
    log.close()
    assert not (tmp_path / "metrics.jsonl").exists()

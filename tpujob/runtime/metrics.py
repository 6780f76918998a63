"""What host 0 tells the orchestrator while it runs: metrics.jsonl and the heartbeat file."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from .contract import HEARTBEAT_FILE, METRICS_FILE, write_json_atomic


class MetricsLog:
    """Appends one JSON object per line; a no-op on hosts other than 0."""

    def __init__(self, run_dir: Path, enabled: bool):
        self._file = (run_dir / METRICS_FILE).open("a") if enabled else None

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class Heartbeat:
    """Rewrites `heartbeat` every `interval` seconds from a thread, so a long compile or
    checkpoint still shows a live process; `step` and `phase` say whether it progresses."""

    def __init__(self, run_dir: Path, interval: float, enabled: bool, info: dict[str, Any]):
        self._path = run_dir / HEARTBEAT_FILE
        self._interval = interval
        self._info = info
        self._enabled = enabled
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.step, self.phase = 0, "starting"
        # When step or phase last changed: the heartbeat thread beats on while the main thread
        # is blocked (a collective waiting for a frozen peer), so only this tells a hang.
        self.progress_time = time.time()
        self.resumed_from: int | None = None  # the checkpoint step this run restored, if any
        self.startup: dict[str, Any] | None = None  # Trainer._report_startup's, once step 1 is done
        self.ledger: dict[str, int] = {}  # contract.LEDGER_KEYS, flat: what status.sh reads
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        if self._enabled:
            self.beat()
            self._thread.start()

    def update(self, step: int | None = None, phase: str | None = None) -> None:
        with self._lock:
            if (step is not None and step != self.step) or (phase is not None and phase != self.phase):
                self.progress_time = time.time()
            self.step = self.step if step is None else step
            self.phase = self.phase if phase is None else phase

    def beat(self) -> None:
        with self._lock:
            data = {**self.ledger, **self._info, "time": time.time(), "step": self.step, "phase": self.phase,
                    "resumed_from": self.resumed_from, "startup": self.startup,
                    # Only while training: a compile, a restore or a save may rightly take
                    # minutes without a step (the orchestrator judges those by the heartbeat's
                    # own age alone).
                    "progress_time": int(self.progress_time) if self.phase == "training" else None}
        try:
            write_json_atomic(self._path, data)
        except OSError:
            pass  # a flaky mount must not kill training; the next beat retries

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._enabled:
            self.beat()

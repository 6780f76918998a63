"""The metadata server's preemption notice: `instance/preempted` reads TRUE once a Spot VM is
being preempted (stanford-crfm/levanter src/levanter/infra/tpus.py polls it to tell a preemption from
a crash).
Read every `preempted_poll_s` by a thread, and a TRUE is handled as a first SIGTERM: checkpoint at
the next step boundary within the grace. systemd's SIGTERM may come late or, on a hung host, not
reach a blocked program's loop; the flag does.

Only where a metadata server exists: on a TPU VM (metadata.google.internal), or where
GCE_METADATA_HOST names one (the variable Google's auth libraries read; the emulator sets it on
each emulated host to a loopback server of its own). Elsewhere nothing is asked: a standalone run
never sends a request off the machine.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from typing import Callable, Mapping

log = logging.getLogger("tpujob.runtime")

PATH = "/computeMetadata/v1/instance/preempted"
DEFAULT_HOST = "metadata.google.internal"
TIMEOUT_S = 2.0


def preempted_url(env: Mapping[str, str], on_tpu_vm: bool) -> str | None:
    host = env.get("GCE_METADATA_HOST")
    if host:
        return f"http://{host}{PATH}"
    return f"http://{DEFAULT_HOST}{PATH}" if on_tpu_vm else None


def read_preempted(url: str) -> bool | None:
    """TRUE -> True, FALSE -> False; None when the server cannot be read (logged by the caller)."""
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return answer.read().decode(errors="replace").strip().upper() == "TRUE"
    except (OSError, urllib.error.URLError, ValueError):
        return None


class PreemptedPoller:
    """Reads `url` every `interval` s until stopped; calls `notice` once, on the first TRUE."""

    def __init__(self, url: str, interval: float, notice: Callable[[str], None]):
        self.url, self.interval, self._notice = url, interval, notice
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preempted-poll", daemon=True)
        self._failed = False

    def start(self) -> PreemptedPoller:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            said = read_preempted(self.url)
            if said is None and not self._failed:
                self._failed = True  # said once: a VM without the key would repeat it forever
                log.warning("cannot read %s; will keep trying", self.url)
            if said:
                self._notice("metadata instance/preempted is TRUE")
                return

    def stop(self) -> None:
        self._stop.set()

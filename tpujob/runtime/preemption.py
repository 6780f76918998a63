"""SIGTERM handling: a flag the train loop acts on at a step boundary, and a way out when it can't.

Cloud TPU sends SIGTERM and allows minutes before the kill, so the first SIGTERM only asks the
loop to checkpoint and stop at the next step boundary. But a process can be blocked where the
loop never looks at the flag (a collective waiting for a dead peer, a checkpoint write to a
hung mount), and there a Python signal handler does not even run: CPython runs handlers on the
main thread between bytecodes, and the main thread is inside XLA. Swallowing every SIGTERM
would then leave an unkillable process holding the TPU. So a watcher thread learns of each
SIGTERM through the interpreter's wakeup fd (written by the C-level handler, whatever the main
thread is doing), and on a second SIGTERM, or once `grace_s` have passed since the first, it
restores the default action and re-sends the signal: the process dies of SIGTERM (exit -15).
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import threading
import time

log = logging.getLogger("tpujob.runtime")


def _die_of_sigterm() -> None:
    # signal.signal() may only be called from the main thread, which may be blocked: set the
    # kernel's disposition through libc instead. SIGKILL if even that is unavailable.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(signal.SIGTERM, ctypes.c_void_p(int(signal.SIG_DFL)))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal is delivered at once; this is only in case it was not
    except Exception:  # noqa: BLE001 - dying is the point
        pass
    os.kill(os.getpid(), signal.SIGKILL)


class Preemption:
    """Install on the main thread; `requested` turns true on the first SIGTERM."""

    def __init__(self, grace_s: float) -> None:
        self.requested = False
        self.source = "SIGTERM"  # what gave the notice, for status.json's message
        self.grace_s = grace_s
        self._count = 0
        self._first_at: float | None = None
        self._closed = threading.Event()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # the C handler must never block on it
        self._previous_handler = signal.signal(signal.SIGTERM, self._handle)
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="sigterm-watch", daemon=True)
        self._thread.start()

    def notice(self, source: str) -> None:
        """A preemption notice other than SIGTERM (the metadata server's instance/preempted),
        from any thread: the same as a first SIGTERM, grace included."""
        if self.requested or self._closed.is_set():
            return
        self.source = source
        self.requested = True
        self._first_at = time.monotonic()
        log.warning("%s: checkpoint and stop at the next step boundary (%.0f s, or a SIGTERM, "
                    "ends the process)", source, self.grace_s)
        try:
            os.write(self._write_fd, b"\0")  # the watcher's timeout now counts the grace
        except OSError:
            pass

    def seconds_left(self) -> float:
        """Of the grace since the notice (all of it before one)."""
        if self._first_at is None:
            return self.grace_s
        return self.grace_s - (time.monotonic() - self._first_at)

    def _handle(self, signum, frame) -> None:
        # Runs only when the main thread reaches Python code; the watcher does the real work.
        self.requested = True

    def _watch(self) -> None:
        while not self._closed.is_set():
            timeout = None
            if self._first_at is not None:
                timeout = max(0.0, self._first_at + self.grace_s - time.monotonic())
            readable, _, _ = select.select([self._read_fd], [], [], timeout)
            if self._closed.is_set():
                return
            if readable:
                data = os.read(self._read_fd, 64)
                terms = data.count(bytes([signal.SIGTERM]))
                if not terms:
                    continue  # another signal's wakeup byte
                self._count += terms
                self.requested = True
                if self._first_at is None:
                    self._first_at = time.monotonic()
                    log.warning("SIGTERM: checkpoint and stop at the next step boundary "
                                "(a second SIGTERM, or %.0f s, ends the process)", self.grace_s)
                if self._count >= 2:
                    log.error("second SIGTERM: exiting without a checkpoint")
                    _die_of_sigterm()
            elif self._first_at is not None:
                log.error("still running %.0f s after SIGTERM (blocked?): exiting without a "
                          "checkpoint", self.grace_s)
                _die_of_sigterm()

    def restore(self) -> None:
        """Back to the handler and wakeup fd that were there before (main thread only)."""
        self._closed.set()
        signal.set_wakeup_fd(self._previous_fd)
        signal.signal(signal.SIGTERM, self._previous_handler)
        os.write(self._write_fd, b"\0")  # wake the watcher so that it sees _closed
        self._thread.join(timeout=5)
        os.close(self._read_fd)
        os.close(self._write_fd)

"""The live line `create`, `resume` and `demo` print on stderr while hosts go through a step."""

from __future__ import annotations

import threading
import time


class HostProgressLine:
    """`setup: 3/8 hosts done, waiting on 2, 5` on stderr as hosts finish a step. On a terminal
    one line rewritten in place (ended when the step is done); otherwise plain lines, at most
    one a second, and always the step's last one."""

    SHOWN_PENDING = 6   # beyond that, a count: the slow hosts are the few left at the end

    def __init__(self, stream, *, tty: bool, clock=time.monotonic):
        self.stream, self.tty, self.clock = stream, tty, clock
        self.lock = threading.Lock()   # hosts' worker threads report at once
        self.last_plain = 0.0
        self.open = False   # a terminal line is showing and not yet ended

    def __call__(self, step: str, p) -> None:
        waiting = ""
        if p.pending:
            shown = ", ".join(str(i) for i in p.pending[:self.SHOWN_PENDING])
            more = f" (+{len(p.pending) - self.SHOWN_PENDING} more)" if len(p.pending) > self.SHOWN_PENDING else ""
            waiting = f", waiting on host{'s' if len(p.pending) > 1 else ''} {shown}{more}"
        failed = f", {p.failed} failed" if p.failed else ""
        text = f"  {step}: {p.done}/{p.total} hosts done{failed}{waiting}"
        finished = p.done == p.total
        with self.lock:
            self._write(text, finished)

    def _write(self, text: str, finished: bool) -> None:
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K" + ("\n" if finished else ""))
            self.open = not finished
        elif finished or self.clock() - self.last_plain >= 1.0:
            self.stream.write(text + "\n")
            self.last_plain = self.clock()
        self.stream.flush()

    def end_line(self) -> None:
        """Before another line is printed: end a terminal line left open."""
        with self.lock:
            if not self.open:
                return
            self.stream.write("\n")
            self.stream.flush()
            self.open = False

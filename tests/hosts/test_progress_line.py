"""The live `k/N hosts done` line `create` and `resume` print while hosts are set up."""

from __future__ import annotations

import io

from tpujob.cli.progress_line import HostProgressLine
from tpujob.hosts.fanout import Progress


def feed(line, step="setup", total=4, order=(2, 0, 3, 1)):
    pending = set(range(total))
    for i in order:
        pending.discard(i)
        line(step, Progress(total - len(pending), total, 0, tuple(sorted(pending))))


def test_on_a_terminal_one_line_is_rewritten_and_ended_when_done():
    out = io.StringIO()
    feed(HostProgressLine(out, tty=True))
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    frames = [f.replace("\x1b[K", "") for f in text.rstrip("\n").split("\r") if f]
    assert frames == ["  setup: 1/4 hosts done, waiting on hosts 0, 1, 3",
                      "  setup: 2/4 hosts done, waiting on hosts 1, 3",
                      "  setup: 3/4 hosts done, waiting on host 1",
                      "  setup: 4/4 hosts done"]


def test_elsewhere_plain_lines_at_most_one_a_second_and_always_the_last():
    out, now = io.StringIO(), [100.0]
    line = HostProgressLine(out, tty=False, clock=lambda: now[0])
    feed(line, total=40, order=range(40))
    assert out.getvalue().splitlines() == [
        "  setup: 1/40 hosts done, waiting on hosts 1, 2, 3, 4, 5, 6 (+33 more)",
        "  setup: 40/40 hosts done"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_an_event_printed_meanwhile_ends_an_open_terminal_line_first():
    out = io.StringIO()
    line = HostProgressLine(out, tty=True)
    line("mount", Progress(1, 2, 1, (1,)))
    line.end_line()
    line.end_line()   # once only
    assert out.getvalue().replace("\x1b[K", "") == "\r  mount: 1/2 hosts done, 1 failed, waiting on host 1\n"

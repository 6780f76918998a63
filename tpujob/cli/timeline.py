"""`show --timeline`: the dashboard's attempt timeline in the terminal, a row of cells per attempt.

Each state has its own character as well as its colour, so the picture reads the same piped
into a file or a terminal without colours; a preemption or NaN restart replaces the cell where
its attempt ended."""

from __future__ import annotations

import time

from rich.console import Console
from rich.text import Text

CELLS = {  # state -> (character, colour)
    "PENDING": (".", "grey50"), "PROVISIONING": ("░", "yellow"), "SETTING_UP": ("▒", "blue"),
    "RUNNING": ("█", "green"), "RECOVERING": ("~", "dark_orange"), "CANCELLED": ("·", "grey50"),
}
MARKS = {"preempted": ("P", "bold red"), "nan": ("N", "bold magenta")}
LABEL = 12  # "attempt 12  "


def _state_at(spans, at: float) -> str | None:
    for span in spans:
        if span.start <= at < span.end:
            return span.state
    return None


def timeline_dict(line) -> dict:
    """The timeline for `show --json --timeline`."""
    return {"start": line.start, "end": line.end,
            "bars": [{"attempt": b.attempt, "slice_name": b.slice_name, "zone": b.zone, "start": b.start,
                      "end": b.end, "end_reason": b.end_reason, "slice": b.slice,
                      "spans": [{"state": s.state, "start": s.start, "end": s.end} for s in b.spans]}
                     for b in line.bars],
            "marks": [{"at": m.at, "kind": m.kind, "attempt": m.attempt, "slice": m.slice} for m in line.marks]}


def print_timeline(line, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=True)
    if not line.bars:
        console.print("timeline: no attempt yet")
        return
    width = max(20, min(console.width, 160) - LABEL - 1)
    cell = line.seconds / width
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(line.start))
    console.print(f"timeline: {clock} + {line.seconds:.0f} s, one cell = {cell:.1f} s")
    for bar in line.bars:
        label = f"attempt {bar.attempt}" if bar.slice in (None, 0) else f"  slice {bar.slice}"
        row = Text(label.ljust(LABEL))
        cells = []
        for i in range(width):
            lo, hi = line.start + i * cell, line.start + (i + 1) * cell
            state = _state_at(bar.spans, lo + cell / 2) if bar.start < hi and lo < bar.end else None
            cells.append(CELLS.get(state, (" ", "")) if state else (" ", ""))
        for mark in line.marks:
            if (mark.attempt, mark.slice) == (bar.attempt, bar.slice):
                cells[min(width - 1, max(0, int((mark.at - line.start) / cell)))] = MARKS[mark.kind]
        for char, style in cells:
            row.append(char, style=style or None)
        if bar.end_reason and (bar.slice is None or bar.slice == 0 or any(
                (m.attempt, m.slice) == (bar.attempt, bar.slice) for m in line.marks)):
            row.append(f" {bar.end_reason}" + ("" if bar.slice is None else f" (slice {bar.slice})"))
        console.print(row)
    keys = Text(" " * LABEL)
    for state, (char, style) in CELLS.items():
        keys.append(char, style=style).append(f" {state}  ")
    for kind, (char, style) in MARKS.items():
        keys.append(char, style=style).append(f" {kind}  ")
    console.print(keys)

"""A span of time as tpujob prints it: `45s`, `1m00s`, `1h46m`, `1d12h`, or one unit (`5m`).

The one formatter of durations for the CLI, the progress line and the dashboard, so that the same
span reads the same everywhere. Pure: no imports (`tpujob list` uses it).
"""

from __future__ import annotations

from typing import Literal

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_INDEX = {unit: i for i, (unit, _) in enumerate(_UNITS)}


def duration_text(seconds: float, *, parts: int = 2, finest: Literal["m", "s"] = "s") -> str:
    """`seconds` (rounded; a negative span reads as 0s) in its largest whole unit, then the next
    `parts - 1` units, each two digits, zero parts kept: 1m00s, 1h46m, 1d12h. `parts=1`: one
    unit, as a table's age (`5m`, `3h`). `finest="m"`: no seconds after minutes, for an estimate
    (`about 1h46m left`, `over the last 5m`); a span under a minute still says its seconds."""
    left = max(0, int(round(seconds)))
    first = next(i for i, (_, size) in enumerate(_UNITS) if left >= size or size == 1)
    stop = max(first + 1, min(first + parts, _INDEX[finest] + 1))
    text = ""
    for i in range(first, stop):
        unit, size = _UNITS[i]
        count, left = divmod(left, size)
        text += f"{count}{unit}" if i == first else f"{count:02d}{unit}"
    return text

"""What a host said, bounded and redacted; and why a host step failed, in one line: its exit
code or error, then the last lines the host said.

Every message that reports a failed host step (setup, mounts, sync, launch, stop, unmount) is
built here, so that an event, `show` and `create` say the cause (`gcsfuse: ... bucket doesn't
exist`), not only `exit code 1`. The lines are the host's stderr (its stdout when stderr said
nothing), bounded, and redacted: a job's secret values and anything shaped like
`TOKEN=...`/`PASSWORD=...` never reach the store.
"""

from __future__ import annotations

import re
from typing import Iterable, Protocol


class HostAnswer(Protocol):
    """What a host's step left (fanout.HostResult is one): what it printed, and how it ended."""

    output: str  # stdout and stderr as they came
    stderr: str  # stderr alone

    def describe(self) -> str: ...

MAX_LINES = 5        # the last non-empty lines kept
MAX_LINE_CHARS = 300  # a longer line keeps its end, where tools put the reason
MAX_CHARS = 400      # the whole cause, lines joined with " | "
MIN_PART = 40        # an older line cut shorter than this is left out instead
JOIN = " | "
MASK = "***"

# NAME=VALUE where NAME says it holds a credential (HF_TOKEN=..., --password=..., AWS_SECRET_ACCESS_KEY=...).
_SECRET_PAIR = re.compile(
    r"(?i)([\w.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)"
    r"[\w.-]*[ \t]*=[ \t]*)(\"[^\"]*\"|'[^']*'|\S+)")  # one line's pair: never the next line
_BEARER = re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]+")
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def redact(text: str, secret_values: Iterable[str] = ()) -> str:
    """`text` with every secret value, and the value of every credential-looking NAME=VALUE
    pair or bearer token, replaced by ***. Longer values first: one may contain another."""
    for value in sorted({v for v in secret_values if v}, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _SECRET_PAIR.sub(lambda m: m.group(1) + MASK, text)
    return _BEARER.sub(lambda m: m.group(1) + MASK, text)


def last_lines(text: str, secret_values: Iterable[str] = (), *, lines: int = MAX_LINES,
               chars: int = MAX_CHARS) -> str:
    """The last `lines` non-empty lines of `text`, redacted, joined into one line of at most
    `chars` characters. The newest lines are kept whole; the oldest one kept loses its start
    (where a tool's chain of error prefixes is, its reason being at the end)."""
    # Redacted before it is cut: a secret split by a cut must not survive in halves.
    text = redact(text[-(64 * 1024):], secret_values)
    kept: list[str] = []
    room = chars
    for line in reversed(text.split("\n")):
        line = _CONTROL.sub("", line.rstrip("\r").rsplit("\r", 1)[-1]).strip()  # a progress bar: its last state
        if not line:
            continue
        if len(line) > MAX_LINE_CHARS:
            line = "…" + line[-(MAX_LINE_CHARS - 1):]
        space = room - (len(JOIN) if kept else 0)
        if len(line) > space:
            if space >= min(MIN_PART, chars):
                kept.insert(0, "…" + line[-(space - 1):])
            break
        kept.insert(0, line)
        room = space - len(line)
        if len(kept) == lines:
            break
    return JOIN.join(kept)


def said(result: HostAnswer, secret_values: Iterable[str] = (), *, chars: int = MAX_CHARS) -> str:
    """What the host said last: its stderr, or its stdout when stderr was silent."""
    return (last_lines(result.stderr, secret_values, chars=chars)
            or last_lines(result.output, secret_values, chars=chars))


def cause(result: HostAnswer, secret_values: Iterable[str] = (), *, chars: int = MAX_CHARS) -> str:
    """`exit code 3: boom | ...`: how the host's step ended, then what it said last."""
    how = redact(result.describe(), secret_values)
    last = said(result, secret_values, chars=chars)
    return f"{how}: {last}" if last else how

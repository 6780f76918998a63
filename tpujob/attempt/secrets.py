"""Secret values for a job's hosts: the caller's environment, else `$TPUJOB_HOME/secrets.env`.

A spec names its secrets; their values never reach the store, a log or `--json`. `create`
needs them in the shell that runs it (or in the file); an unattended sweep (cron, where the
shell's variables are gone) reads them from the file. Only setup and launch need values:
status, stop, logs and exec never do.

secrets.env holds `KEY=VALUE` lines (blank lines and `#` comments skipped, an optional
`export ` prefix, one pair of surrounding quotes stripped) and must not be readable by group or
others: a looser file is refused, not read.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Mapping

from tpujob import settings as settings_mod
from tpujob.errors import ConfigError

FILE_NAME = "secrets.env"
_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)")


def secrets_file() -> Path:
    return settings_mod.home() / FILE_NAME


def read_file(path: Path) -> dict[str, str]:
    """The pairs of a secrets file; {} when there is none. ConfigError when it is readable by
    group or others, or holds a line that is not KEY=VALUE (neither message quotes a value)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} is readable by group or others (mode {stat.S_IMODE(mode):o}): "
                          f"refusing to read secrets from it; run chmod 600 {path}")
    values = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if not match:
            raise ConfigError(f"{path} line {number}: expected KEY=VALUE")
        value = match.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[match.group(1)] = value
    return values


def resolve(names: list[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{name: value} for every secret the spec names: from `environ` (the process's by
    default), else from secrets.env (read only when something is missing there). ConfigError
    naming what is missing, and where it was looked for."""
    environ = os.environ if environ is None else environ
    values = {name: environ[name] for name in names if name in environ}
    missing = [name for name in names if name not in values]
    if not missing:
        return values
    path = secrets_file()
    from_file = read_file(path)
    values.update({name: from_file[name] for name in missing if name in from_file})
    still = [name for name in names if name not in values]
    if still:
        raise ConfigError(f"secret{'s' if len(still) > 1 else ''} {', '.join(still)} not set: "
                          f"export {'them' if len(still) > 1 else 'it'} or put "
                          f"{'them' if len(still) > 1 else 'it'} in {path} (KEY=VALUE lines, mode 600)")
    return values


def readable(names: list[str], environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The named secrets' values this process can read, each on its own (a sweep from cron may
    not see all of them): masked from what the hosts said (a dead program's log lines, a
    failing step's output) and from the dashboard's log view, on top of host_output.redact's
    credential shapes. A secret that is missing, or a secrets.env that cannot be read (too
    loose, malformed, unreadable), hides only what it would have given: the others are still
    masked."""
    environ = os.environ if environ is None else environ
    values = {name: environ[name] for name in names if environ.get(name)}
    if len(values) < len(names):
        try:
            from_file = read_file(secrets_file())
        except (ConfigError, OSError, UnicodeDecodeError):
            from_file = {}
        values.update({name: from_file[name] for name in names if name not in values and from_file.get(name)})
    return tuple(values[name] for name in names if name in values)

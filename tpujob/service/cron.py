"""The cron entry that runs `tpujob requeue` unattended: install, remove, show.

One crontab line per store ($TPUJOB_HOME), found again by the marker comment at its end. Cron
runs it with a bare environment (PATH=/usr/bin:/bin, no TPUJOB_*), so the line carries absolute
paths and the settings that pick the store and the cloud. `flock -n` skips a sweep while the
previous one still runs instead of piling them up.

A crontab is not private (`/var/spool/cron` is readable by root and backup tools, the line is in
cron's mail and `ps` while it runs): a store URL with a password is written instead to
$TPUJOB_HOME/cron.env (mode 0600), which the line sources.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from tpujob import settings as settings_mod
from tpujob.errors import ConfigError, UsageError

MARKER = "# tpujob-requeue home="
FLOCK = "/usr/bin/flock"
# The longest a cron sweep follows setups (`requeue --settle`): the default setup timeout.
SETTLE_MAX_SECONDS = 15 * 60
# What the sweep reads from the environment and cron's lacks, written into the line when set in
# the installing shell: every setting (tpujob.settings: TPUJOB_CLOUD, TPUJOB_SSH_USER, ...), the
# emulator's directory, and the tuning knobs a sweep reads (tpujob.settings.KNOBS, `cron`).
# Secrets are not: cron reads them from $TPUJOB_HOME/secrets.env (tpujob.attempt.secrets),
# never from its command line. OpenSSL's SSL_CERT_FILE/SSL_CERT_DIR: a lab's own CA, trusted by
# the sweep's STARTTLS to its SMTP server (service/notify.py) as by the installing shell's.
CARRIED = ("TPUJOB_DB_URL", "TPUJOB_CLOUD",
           *(f"TPUJOB_{key.upper()}" for key in settings_mod.KEYS if key not in ("db_url", "cloud")),
           "TPUJOB_EMULATOR_DIR", *(k.variable for k in settings_mod.KNOBS.values() if k.cron),
           "SSL_CERT_FILE", "SSL_CERT_DIR")
ENV_FILE = "cron.env"  # under $TPUJOB_HOME: what the line must carry but not show


@dataclass(frozen=True)
class CronEntry:
    line: str  # the whole crontab line, schedule and marker included
    schedule: str
    command: str  # what cron hands to /bin/sh
    log_path: Path
    lock_path: Path
    env_file: Path  # $TPUJOB_HOME/cron.env, sourced by the line when env_text is not empty
    env_text: str = ""  # `export NAME=value` lines: the store URL when it holds a password


def _interval(every: str) -> tuple[int, str]:
    """`5m` -> (5, "m"); minutes 1-59 or hours 1-23, else UsageError."""
    match = re.fullmatch(r"\s*(\d+)\s*([mh])\s*", every)
    if not match:
        raise UsageError(f"--every takes minutes or hours like 5m or 1h, not {every!r}")
    count, unit = int(match.group(1)), match.group(2)
    if not 1 <= count <= (59 if unit == "m" else 23):
        raise UsageError(f"--every must be 1m-59m or 1h-23h, not {every!r}")
    return count, unit


def schedule_of(every: str) -> str:
    """`5m` -> `*/5 * * * *`, `2h` -> `0 */2 * * *`; minutes 1-59 or hours 1-23."""
    count, unit = _interval(every)
    if unit == "m":
        return "* * * * *" if count == 1 else f"*/{count} * * * *"
    return "0 * * * *" if count == 1 else f"0 */{count} * * *"


def settle_seconds(every: str) -> float:
    """How long a cron sweep follows the setups it started (`requeue --settle`): most of the
    interval, so that the program starts as its setup ends, not a whole interval later; never
    so long that the next run finds the lock still held (`flock -n` would skip it)."""
    count, unit = _interval(every)
    return float(min(0.8 * count * (3600 if unit == "h" else 60), SETTLE_MAX_SECONDS))


def entry(every: str = "5m", *, python: str | None = None,
          environ: Mapping[str, str] | None = None) -> CronEntry:
    """The crontab line for this store, built from the installing process's settings."""
    carried: Mapping[str, str] = os.environ if environ is None else environ
    home = settings_mod.home().resolve()
    python = python or sys.executable
    values = {"TPUJOB_HOME": str(home)}
    values.update({k: carried[k] for k in CARRIED if carried.get(k)})
    hidden = {}
    if _has_password(values.get("TPUJOB_DB_URL", "")):
        hidden["TPUJOB_DB_URL"] = values.pop("TPUJOB_DB_URL")
    log_path, lock_path, env_file = home / "logs" / "requeue.log", home / "requeue.lock", home / ENV_FILE
    for text in [python, *values.values()]:
        # cron turns `%` into a newline; a newline would end the line early.
        if "%" in text or "\n" in text:
            raise ConfigError(f"cannot put {text!r} in a crontab line (it holds % or a newline)")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())
    schedule = schedule_of(every)
    sweep = (f"{env} {FLOCK} -n {shlex.quote(str(lock_path))} {shlex.quote(python)} -m tpujob.cli.main "
             f"requeue --settle {settle_seconds(every):g}")
    log = f">> {shlex.quote(str(log_path))} 2>&1"
    # Sourced in the group, so that a missing or unreadable file is said in the log (and the
    # sweep does not run against another store), not only in cron's mail.
    command = f"{{ . {shlex.quote(str(env_file))} && {sweep}; }} {log}" if hidden else f"{sweep} {log}"
    return CronEntry(line=f"{schedule} {command} {MARKER}{home}", schedule=schedule, command=command,
                     log_path=log_path, lock_path=lock_path, env_file=env_file,
                     env_text="".join(f"export {k}={shlex.quote(v)}\n" for k, v in hidden.items()))


def _has_password(url: str) -> bool:
    """A URL that shows differently redacted holds a password (or cannot be parsed: kept out
    of the line all the same)."""
    return settings_mod.redact_url(url) != url


def _marker() -> str:
    return f"{MARKER}{settings_mod.home().resolve()}"


def _crontab() -> str:
    from tpujob import preflight

    found = preflight.which("crontab")
    if found is None:
        preflight.require([preflight.crontab_check()], "cron")
        raise ConfigError("crontab is not on PATH")  # (require said so, unless it appeared meanwhile)
    return found


def read_crontab() -> str:
    """The user's crontab; empty when they have none."""
    result = subprocess.run([_crontab(), "-l"], capture_output=True, text=True)
    if result.returncode != 0:
        if "no crontab" in result.stderr.lower():
            return ""
        raise ConfigError(f"crontab -l failed: {result.stderr.strip()}")
    return result.stdout


def write_crontab(text: str) -> None:
    result = subprocess.run([_crontab(), "-"], input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise ConfigError(f"crontab refused the new table: {result.stderr.strip()}")


def _without_ours(text: str) -> list[str]:
    marker = _marker()
    return [line for line in text.splitlines() if not line.rstrip().endswith(marker)]


def install(every: str = "5m") -> CronEntry:
    """Add (or replace) this store's line; every other line of the user's crontab is kept."""
    new = entry(every)
    settings_mod.private_dir(new.log_path.parent)
    if new.env_text:
        _write_private(new.env_file, new.env_text)
    lines = _without_ours(read_crontab()) + [new.line]
    write_crontab("\n".join(lines) + "\n")
    if not new.env_text:
        new.env_file.unlink(missing_ok=True)  # an earlier line's password, no longer sourced
    return new


def _write_private(path: Path, text: str) -> None:
    """`text` in `path`, mode 0600 from its first byte (written aside, then renamed over)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a leftover tmp of another mode keeps it under O_CREAT
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove() -> bool:
    """Remove this store's line; returns whether there was one."""
    current = read_crontab()
    kept = _without_ours(current)
    (settings_mod.home().resolve() / ENV_FILE).unlink(missing_ok=True)
    if len(kept) == len(current.splitlines()):
        return False
    write_crontab("\n".join(kept) + "\n" if kept else "")
    return True


def installed() -> str | None:
    """This store's line as the crontab holds it, or None."""
    marker = _marker()
    return next((line for line in read_crontab().splitlines() if line.rstrip().endswith(marker)), None)


def last_log_lines(count: int = 5) -> list[str]:
    path = settings_mod.home().resolve() / "logs" / "requeue.log"
    if not path.exists():
        return []
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 8192))
        return f.read().decode(errors="replace").splitlines()[-count:]

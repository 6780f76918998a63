"""Settings: $TPUJOB_HOME/config.yaml, overridden by TPUJOB_* environment variables.

Kept free of heavy imports: every command, `list` included, reads it.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from tpujob.errors import ConfigError, UsageError

CLOUDS = ("local", "gcp")
# How SSH trusts a host: `strict` only with the key the cloud published in guest attributes;
# `accept-new` also trusts a host that published none on first use, then holds it to that key.
HOST_KEY_POLICIES = ("strict", "accept-new")
# OS Login (the issue's `ssh.os_login`): `true` follows the project (and node) `enable-oslogin`,
# registering tpujob's key through OS Login where it is on; `false` opts the job's nodes out
# with node metadata `enable-oslogin: FALSE` (an organisation policy may refuse that).
OS_LOGIN_CHOICES = ("true", "false")
LOCAL_PROJECT = "tpujob-local"


def home() -> Path:
    return Path(os.environ.get("TPUJOB_HOME") or Path.home() / ".tpujob").expanduser()


def private_dir(path: Path) -> Path:
    """`path` made with each missing parent, every directory made here mode 0700: $TPUJOB_HOME
    holds the store, tpujob's SSH key and secrets.env, and on a shared machine what tpujob writes
    is its user's alone. (`mkdir -p`, like Path.mkdir(parents=True), gives the parents the
    umask's mode, usually 0755.) A directory that exists is left as it is: `doctor` says when
    $TPUJOB_HOME is looser."""
    missing = []
    for parent in (path, *path.parents):
        if parent.exists():
            break
        missing.append(parent)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            pass  # another process made it meanwhile
    return path


def private_file(path: Path) -> Path:
    """`path` created empty with mode 0600 (its directory private_dir) unless it exists: the
    store's SQLite file, which SQLite then opens (its -wal and -shm files take its mode)."""
    private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    return path


@dataclass(frozen=True)
class Settings:
    cloud: str = "local"  # the emulator until a user says gcp
    project: str = ""
    zone: str = ""
    ssh_user: str = "tpujob"
    db_url: str = ""
    ssh_host_keys: str = "strict"
    ssh_os_login: str = "true"
    # Email notifications (docs/notify.md). The password is the secret TPUJOB_SMTP_PASSWORD
    # (environment, else secrets.env), never a setting: config.yaml is not a secrets file.
    smtp_host: str = ""
    smtp_port: str = "587"
    smtp_from: str = ""
    smtp_starttls: str = "true"
    smtp_username: str = ""
    # Who this node submits jobs as (every job records it: `list`'s OWNER, cancel/delete of
    # another user's job asks for --force). Empty: the account ADC carries on `cloud: gcp`, else
    # $USER@host (tpujob/owners.py). A lab convention, not a security boundary.
    user: str = ""

    @property
    def home(self) -> Path:
        return home()

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.home / 'tpujob.db'}"

    @property
    def os_login_opt_out(self) -> bool:
        """`ssh_os_login: false`: nodes are created with `enable-oslogin: FALSE`."""
        return self.ssh_os_login == "false"

    @property
    def effective_project(self) -> str:
        return self.project or (LOCAL_PROJECT if self.cloud == "local" else "")


KEYS = tuple(f.name for f in fields(Settings))


# Tuning read from the environment only (not config.yaml): per process, for cron lines, tests
# and benchmarks. Each is read here, nowhere else; a bad value is a ConfigError (exit 6).
def debug() -> bool:
    """TPUJOB_DEBUG: a traceback with every error."""
    return bool(os.environ.get("TPUJOB_DEBUG"))


@dataclass(frozen=True)
class Knob:
    """A tuning knob: TPUJOB_<name>, a number from `low` to `high` (`above`: more than `low`),
    `default` when unset."""
    name: str
    default: float
    low: float
    high: float
    meaning: str
    whole: bool = False  # a count, not seconds
    cron: bool = False  # a sweep reads it: `tpujob cron install` carries it into the cron line
    above: bool = False  # `low` itself refused

    @property
    def variable(self) -> str:
        return f"TPUJOB_{self.name}"

    @property
    def takes(self) -> str:
        unit = "a whole number" if self.whole else "seconds"
        if self.above:
            return f"{unit} more than {self.low:g}, up to {self.high:g}"
        return f"{unit} from {self.low:g} to {self.high:g}"


# Every tuning knob, the one table: read by `knob`, listed in docs/settings.md
# (scripts/docs_tables; tests/test_tuning.py keeps the two in step).
KNOBS = {k.name: k for k in (
    Knob("SWEEP_WORKERS", 16, 1, 256, "Jobs a sweep acts on at once. Each worker mostly waits on the "
         "cloud and on SSH, and holds SSH connections to a slice's hosts and a store connection.",
         whole=True, cron=True),
    Knob("LEASE_SECONDS", 90.0, 1, 7 * 24 * 3600, "How long a job's lease outlives a sweep that died "
         "holding it. While the sweep lives a thread renews it, through a setup of any length.",
         cron=True),
    Knob("QUEUE_FOLLOW_SECONDS", 30.0, 0, 24 * 3600, "How long `create` and `resume` follow a slice "
         "that waits for capacity (a queued resource, a flex-start VM), or a job QUEUED for the lab's "
         "quota, before handing the job to the sweeps: such a wait lasts minutes to hours on Google. 0: hand it "
         "over once it is seen waiting (a script submitting many jobs)."),
    Knob("NOTIFY_TIMEOUT", 5.0, 0, 120, "Seconds one notification (webhook or email) may take in all.",
         cron=True, above=True),  # 0 s would send nothing
    Knob("CLOCK_SKEW_SECONDS", 0.0, -86400, 86400, "Tests only: this node's clock off by this much, as "
         "a lab node's wrong clock would be (tpujob/clocks.py)."),
)}
KNOBS_BEGIN = "<!-- generated from tpujob/settings.py KNOBS by scripts/docs_tables; edit KNOBS, not this table -->"
KNOBS_END = "<!-- end of knobs -->"


def knob(name: str) -> float:
    """The knob TPUJOB_<name>'s value: its default when unset; a ConfigError (exit 6) naming
    what it takes when it is not a number in its bounds."""
    k = KNOBS[name]
    text = os.environ.get(k.variable, "").strip()
    if not text:
        return k.default
    try:
        value = float(int(text) if k.whole else float(text))
    except ValueError:
        raise ConfigError(f"{k.variable} must be {k.takes}, got {text!r}") from None
    if not (k.low < value if k.above else k.low <= value) or value > k.high:
        raise ConfigError(f"{k.variable} must be {k.takes}, got {text!r}")
    return value


def knobs_markdown() -> str:
    """docs/settings.md's table of the knobs."""
    rows = ["| variable | default | takes | a sweep's (cron carries it) | meaning |",
            "| --- | --- | --- | --- | --- |"]
    for k in KNOBS.values():
        rows.append(f"| `{k.variable}` | {k.default:g} | {k.takes} | {'yes' if k.cron else 'no'} | {k.meaning} |")
    return "\n".join([KNOBS_BEGIN, "", *rows, "", KNOBS_END])


def config_path() -> Path:
    return home() / "config.yaml"


def _read_file() -> dict:
    path = config_path()
    if not path.exists():
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown setting {unknown[0]!r} (known: {', '.join(KEYS)})")
    return {k: str(v) for k, v in data.items() if v is not None}


def load() -> Settings:
    values = _read_file()
    for key in KEYS:
        env = os.environ.get(f"TPUJOB_{key.upper()}")
        if env:
            values[key] = env
    settings = Settings(**values)
    _check_smtp(settings.smtp_port, settings.smtp_starttls, ConfigError)
    if settings.cloud not in CLOUDS:
        raise ConfigError(f"cloud must be one of {', '.join(CLOUDS)}, not {settings.cloud!r}")
    if settings.ssh_host_keys not in HOST_KEY_POLICIES:
        raise ConfigError(f"ssh_host_keys must be one of {', '.join(HOST_KEY_POLICIES)}, "
                          f"not {settings.ssh_host_keys!r}")
    if settings.ssh_os_login not in OS_LOGIN_CHOICES:
        raise ConfigError(f"ssh_os_login must be true or false, not {settings.ssh_os_login!r}")
    _check_user(settings.user, ConfigError)
    return settings


def set_value(key: str, value: str) -> Settings:
    """Write one setting to config.yaml (validated first: nothing is written on bad input)."""
    if key not in KEYS:
        raise UsageError(f"unknown setting {key!r} (known: {', '.join(KEYS)})")
    if key == "cloud" and value not in CLOUDS:
        raise UsageError(f"cloud must be one of {', '.join(CLOUDS)}, not {value!r}")
    if key == "ssh_host_keys" and value not in HOST_KEY_POLICIES:
        raise UsageError(f"ssh_host_keys must be one of {', '.join(HOST_KEY_POLICIES)}, not {value!r}")
    if key == "ssh_os_login" and value not in OS_LOGIN_CHOICES:
        raise UsageError(f"ssh_os_login must be true or false, not {value!r}")
    if key == "user":
        _check_user(value, UsageError)
    if key == "smtp_port":
        _check_smtp(value, "true", UsageError)
    if key == "smtp_starttls":
        _check_smtp("25", value, UsageError)
    import yaml

    data = _read_file()
    data[key] = value
    path = config_path()
    private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    # 0600: db_url may hold the store's password (config show prints it as ***).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)  # a leftover .tmp of another mode keeps that mode under O_CREAT
        out.write(yaml.safe_dump(data, sort_keys=True))
    tmp.replace(path)
    return load()


def _check_smtp(port: str, starttls: str, error: type) -> None:
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise error(f"smtp_port must be a port number from 1 to 65535, not {port!r}")
    if starttls not in ("true", "false"):
        raise error(f"smtp_starttls must be true or false, not {starttls!r}")


# A user name as `list` prints it in one column and `--user` matches it: printable, no spaces.
_USER = re.compile(r"^[^\s\x00-\x1f\x7f]{1,128}$")


def _check_user(user: str, error: type) -> None:
    if user and not _USER.match(user):
        raise error(f"user must be a name without spaces or control characters, at most 128 "
                    f"characters (an email, say), not {user!r}")


def as_dict(settings: Settings) -> dict:
    """The settings for display: a database URL's password is replaced by ***."""
    data = asdict(settings)
    data["db_url"] = redact_url(data["db_url"])
    return data


_URL_PASSWORD = re.compile(r"([A-Za-z][\w+.-]*://[^\s:/@]*:)[^\s@]+@")


def redact_urls_in(text: str) -> str:
    """`text` (a crontab line, say) with the password of every URL in it shown as ***."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def redact_url(url: str) -> str:
    """`url` with its password (if any) shown as ***: for output and error messages, which end
    up in terminals, logs and bug reports."""
    if "@" not in url:
        return url  # no user info, nothing to hide (and no SQLAlchemy import for it)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        # Unparsable (a bad port, say): hide everything before the host rather than guess.
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if sep else f"***@{url.rpartition('@')[2]}"

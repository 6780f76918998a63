"""Host scripts: bash files under templates/, rendered with every value shell-quoted.

A template names its values as `{{name}}`, only as the whole right-hand side of an assignment
at its top (`command={{command}}`), and uses them as "$command" after that. The renderer
substitutes `shlex.quote(str(value))`: a job name, path or command full of quotes, `$()`, `;`
or newlines stays one literal word. Values that are missing or unused are errors, so a
template and its caller cannot drift apart silently.

Environment variables (the runtime contract, the spec's env, secrets) do not go through
templates: `env_payload` encodes them for the script's stdin, which the scripts read with
`read -d ''` and `export "$pair"` — no file, no command line, no log ever holds them.

The script itself travels on stdin too, ahead of that payload (`as_command`): the SSH command is
a fixed bootstrap of a few bytes whatever the script holds. On the command line a script was one
argument of the host's `$SHELL -c`, which Linux bounds at MAX_ARG_STRLEN (131072 bytes): a 15.9
KB setup with 2,000 quotes, quoted into setup.sh, into setup_start.sh and into the command,
made 128,609 bytes and failed on the host only.
"""

from __future__ import annotations

import importlib.resources
import pathlib
import re
import shlex
from dataclasses import dataclass
from functools import cache

from tpujob.errors import UsageError
from tpujob.runtime.contract import MAX_ARG_BYTES, MAX_ENV_BYTES

# A checkout keeps the scripts in the top-level templates/; tpujob/templates links to it so that
# a wheel carries them as package data.
_CHECKOUT_TEMPLATES = pathlib.Path(__file__).resolve().parents[2] / "templates"

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@cache
def templates_dir():
    """Where the host scripts are: the installed package's templates/ (a wheel, or the symlink
    in an editable checkout), else the checkout's top-level templates/ (a checkout whose
    symlink was lost, e.g. by an archive tool that drops links)."""
    packaged = importlib.resources.files("tpujob") / "templates"
    if packaged.is_dir():
        return packaged
    return _CHECKOUT_TEMPLATES


def render(name: str, **values: object) -> str:
    """The text of templates/NAME with each {{key}} replaced by shlex.quote(str(value))."""
    text = (templates_dir() / name).read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    missing, unused = wanted - values.keys(), values.keys() - wanted
    if missing or unused:
        raise ValueError(f"template {name}: missing {sorted(missing)}, unused {sorted(unused)}")
    for key, value in values.items():
        if "\0" in str(value):  # a shell word cannot hold one, and it would end the shipped script
            raise UsageError(f"{key} contains a NUL byte")
    return _PLACEHOLDER.sub(lambda m: shlex.quote(str(values[m.group(1)])), text)


# Reads the script up to its NUL (bash's `read` takes no byte past the delimiter from a pipe),
# then runs it in this shell: whatever stdin holds next (the env payload) is the script's own.
_BOOTSTRAP = 'IFS= read -r -d "" tpujob_script || exit 125; eval "$tpujob_script"'


@dataclass(frozen=True)
class HostCommand:
    """A host script as SSH runs it: `command`, a fixed bootstrap (bash, whatever the login
    shell is), and `preamble`, the script and a NUL, sent on stdin before the caller's stdin."""
    script: str
    name: str

    @property
    def command(self) -> str:
        return f"exec bash -c {shlex.quote(_BOOTSTRAP)} {shlex.quote(self.name)}"

    @property
    def preamble(self) -> bytes:
        return self.script.encode() + b"\0"


def as_command(script: str, name: str) -> HostCommand:
    """`script` (a rendered template) to run with bash on a host, shipped on stdin."""
    if "\0" in script:
        raise UsageError(f"{name}: the script contains a NUL byte")
    return HostCommand(script, name)


def env_payload(env: dict[str, str]) -> bytes:
    """NUL-separated NAME=VALUE pairs, as the scripts read them from stdin. The scripts export
    them, so each must fit in one exec's environment on the host (contract.MAX_ARG_BYTES, and
    MAX_ENV_BYTES in all): a secret's value, unknown at validate, is refused here, before any
    host is asked."""
    parts = []
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise UsageError(f"environment variable name {key!r} is not a valid shell name")
        value = str(value)
        if "\0" in value:
            raise UsageError(f"environment variable {key} contains a NUL byte")
        pair = f"{key}={value}".encode()
        if len(pair) > MAX_ARG_BYTES:
            raise UsageError(f"environment variable {key} is {len(pair)} bytes with its name; a host "
                             f"takes at most {MAX_ARG_BYTES} (Linux's MAX_ARG_STRLEN)")
        parts.append(pair + b"\0")
    payload = b"".join(parts)
    if len(payload) > MAX_ENV_BYTES:
        raise UsageError(f"the environment is {len(payload)} bytes in all; tpujob passes at most "
                         f"{MAX_ENV_BYTES} to a host (a quarter of its stack limit holds every exec's "
                         "arguments and environment)")
    return payload

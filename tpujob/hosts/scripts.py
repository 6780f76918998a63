"""Host scripts: bash files under templates/, rendered with every value shell-quoted.

A template names its values as `{{name}}`, only as the whole right-hand side of an assignment
at its top (`command={{command}}`), and uses them as "$command" after that. The renderer
substitutes `shlex.quote(str(value))`: a job name, path or command full of quotes, `$()`, `;`
or newlines stays one literal word. Values that are missing or unused are errors, so a
template and its caller cannot drift apart silently.

Environment variables (the runtime contract, the spec's env, secrets) do not go through
templates: `env_payload` encodes them for the script's stdin, which the scripts read with
`read -d ''` and `export "$pair"` — no file, no command line, no log ever holds them.
"""

from __future__ import annotations

import importlib.resources
import pathlib
import re
import shlex
from functools import cache

from tpujob.errors import UsageError

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
    return _PLACEHOLDER.sub(lambda m: shlex.quote(str(values[m.group(1)])), text)


def as_command(script: str, name: str) -> str:
    """The SSH command that runs `script` with bash, whatever the login shell is."""
    return f"exec bash -c {shlex.quote(script)} {shlex.quote(name)}"


def env_payload(env: dict[str, str]) -> bytes:
    """NUL-separated NAME=VALUE pairs, as the scripts read them from stdin."""
    parts = []
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise UsageError(f"environment variable name {key!r} is not a valid shell name")
        value = str(value)
        if "\0" in value:
            raise UsageError(f"environment variable {key} contains a NUL byte")
        parts.append(f"{key}={value}\0")
    return "".join(parts).encode()

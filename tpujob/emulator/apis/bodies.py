"""Reading and writing the APIs' JSON bodies: a request's body, a stored body's copy, resource
ids, timestamps and durations, and the `ssh-keys` metadata lines both APIs take."""

from __future__ import annotations

import datetime
import json
import re

from tpujob.emulator.apis.errors import ApiError

_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def duration_seconds(value: str | None) -> float | None:
    return float(value.rstrip("s")) if value else None


def copy_json(body: dict) -> dict:
    return json.loads(json.dumps(body))


def check_id(value: str, what: str) -> None:
    if not value or len(value) > 63 or not _ID.match(value):
        raise ApiError(400, f"{what} {value!r} must match {_ID.pattern} (at most 63 characters)")


def authorized_keys(metadata: dict) -> list[str]:
    """The lines of `ssh-keys` metadata ("USER:KEY" per line, as on GCE), USER kept."""
    return [line.strip() for line in metadata.get("ssh-keys", "").splitlines() if line.strip()]


def read_json(request) -> dict:
    """A request's JSON body (werkzeug's Request), {} when empty; 400 when not a JSON object."""
    if not request.get_data():
        return {}
    try:
        body = json.loads(request.get_data())
    except ValueError as err:
        raise ApiError(400, f"invalid JSON body: {err}") from err
    if not isinstance(body, dict):
        raise ApiError(400, "the JSON body must be an object")
    return body

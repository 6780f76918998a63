"""An emulator in this process on a free port, hosts switched off unless a test passes a factory."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


@pytest.fixture
def http(server):
    """Call the server with plain JSON: (status code, body)."""

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    return call

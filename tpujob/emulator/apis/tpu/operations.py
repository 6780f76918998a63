"""Long-running operations of the emulated TPU API, kept as the API's JSON.

An operation starts `{"name", "done": false, "metadata": OperationMetadata}` and ends with
either `response` (typed by `@type`: `...tpu.v2.Node`, `...tpu.v2.QueuedResource`, or
`google.protobuf.Empty` for deletes) or `error` `{code, message}` (google.rpc.Status); the
client library's poller reads exactly these (google-cloud-tpu's REST transport: `operation.result()`
polls `GET .../operations/OP` on the client's own endpoint). Callers hold the world's lock.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from tpujob.emulator.apis.bodies import copy_json, now
from tpujob.emulator.apis.errors import ApiError


class Operations:
    def __init__(self) -> None:
        self._ops: dict[str, dict] = {}
        self._ids = itertools.count(1)

    def new(self, parent: str, verb: str, target: str) -> dict:
        name = f"{parent}/operations/operation-{next(self._ids)}-{uuid.uuid4().hex[:12]}"
        op = {"name": name, "done": False,
              "metadata": {"@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                           "createTime": now(), "target": target, "verb": verb,
                           "apiVersion": "v2"}}
        self._ops[name] = op
        return copy_json(op)

    def finish(self, op: dict, response: tuple[str, Any] | None = None,
               error: tuple[int, str] | dict | None = None) -> None:
        stored = self._ops[op["name"]]
        stored["done"] = True
        stored["metadata"]["endTime"] = now()
        if error:  # google.rpc.Status: {code, message[, details]}
            stored["error"] = dict(error) if isinstance(error, dict) else {"code": error[0],
                                                                           "message": error[1]}
        else:
            kind, body = response if response is not None else ("Empty", None)
            package = "google.protobuf" if kind == "Empty" else "google.cloud.tpu.v2"
            stored["response"] = {"@type": f"type.googleapis.com/{package}.{kind}", **(body or {})}

    def get(self, name: str) -> dict:
        if name not in self._ops:
            raise ApiError(404, f"Operation '{name}' was not found")
        return copy_json(self._ops[name])

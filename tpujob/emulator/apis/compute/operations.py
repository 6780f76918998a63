"""Compute Engine operations (zonal, regional, global), kept as the API's JSON, and Compute's
error bodies.

An operation is `compute#operation` (compute.v1.json revision 20261106, Operation): status
PENDING, RUNNING or DONE; a failed one is DONE with `error.errors[{code, message}]`,
`httpErrorStatusCode` and `httpErrorMessage` (the shape CCExtractor/sample-platform#901 quotes for
an instance insert that met ZONE_RESOURCE_POOL_EXHAUSTED). Disk and snapshot methods finish
theirs before answering; instance inserts and deletes finish theirs from a worker thread, so
`wait` really waits (zoneOperations.wait: "waits for no more than the 2 minutes and then
returns the current state of the operation").
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

from tpujob.emulator.apis.bodies import copy_json, now
from tpujob.emulator.apis.errors import ApiError

API_ROOT = "https://www.googleapis.com/compute/v1"
WAIT_SECONDS = 120.0  # zoneOperations.wait's deadline (compute.v1.json, above)

# Google's JSON-API `errors[].reason` per HTTP status (failnext.COMPUTE_REASONS has the same
# table for replayed faults); a refusal may name its own (e.g. "invalid": terratest#1132).
HTTP_PHRASES = {400: "BAD REQUEST", 403: "FORBIDDEN", 404: "NOT FOUND", 409: "CONFLICT",
                412: "PRECONDITION FAILED", 500: "INTERNAL SERVER ERROR",
                503: "SERVICE UNAVAILABLE"}


def refusal(status: int, message: str, reason: str) -> ApiError:
    """A synchronous Compute refusal in Compute's body: `{"error": {"code", "message",
    "errors": [{"message", "domain": "global", "reason"}]}}` (jenkinsci/google-compute-engine-
    plugin#63 quotes one for instances.insert)."""
    return ApiError(status, message, payload={"error": {
        "code": status, "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}]}})


def operation_error(code: str, message: str, http_status: int) -> dict:
    """The fields a failed operation carries: error.errors[{code, message}] and the HTTP pair
    (CCExtractor/sample-platform#901; scylladb/scylla-cluster-tests#12477 shows a stockout as
    "503 SERVICE UNAVAILABLE")."""
    return {"error": {"errors": [{"code": code, "message": message}]},
            "httpErrorStatusCode": http_status,
            "httpErrorMessage": HTTP_PHRASES.get(http_status, str(http_status))}


class ComputeOperations:
    """Every operation of the emulated Compute API, by project and scope (zone, region or
    global). Its own lock: callers may hold the TPU emulator's lock when they call in."""

    def __init__(self) -> None:
        self._ops: dict[str, dict] = {}
        self._ids = itertools.count(1)
        self._changed = threading.Condition()

    def new(self, project: str, scope: str | None, kind: str, target: str, done: bool = True,
            region: bool = False) -> dict:
        """An operation on `target`; `scope` a zone (or a region, with `region`), None: global.
        `done`: finished already (the disk methods), else RUNNING until `finish`."""
        name = f"operation-{next(self._ids)}-{uuid.uuid4().hex[:12]}"
        where = (f"regions/{scope}" if region else f"zones/{scope}") if scope else "global"
        op = {"kind": "compute#operation", "id": str(uuid.uuid4().int % 2**63), "name": name,
              "operationType": kind, "targetLink": target, "status": "RUNNING", "progress": 0,
              "insertTime": now(), "startTime": now(),
              "selfLink": f"{API_ROOT}/projects/{project}/{where}/operations/{name}"}
        if scope:
            op["region" if region else "zone"] = f"{API_ROOT}/projects/{project}/{where}"
        with self._changed:
            self._ops[self._key(project, scope, name)] = op
            if done:
                self._finish(op, None)
            return copy_json(op)

    def finish(self, op: dict, error: dict | None = None) -> None:
        """DONE, with the fields of operation_error() when it failed."""
        with self._changed:
            self._finish(self._ops[self._key_of(op)], error)

    def list(self, project: str, zone: str) -> list[dict]:
        """A zone's operations, oldest first (zoneOperations.list; its filter: api.py)."""
        where = f"{API_ROOT}/projects/{project}/zones/{zone}"
        with self._changed:
            return [copy_json(op) for op in self._ops.values() if op.get("zone") == where]

    def annotate(self, op: dict, **fields: str) -> None:
        """Output fields of a system event's operation (statusMessage)."""
        with self._changed:
            self._ops[self._key_of(op)].update(fields)

    def get(self, project: str, scope: str | None, name: str) -> dict:
        with self._changed:
            key = self._key(project, scope, name)
            if key not in self._ops:
                raise ApiError(404, f"The resource 'operation {name}' was not found")
            return copy_json(self._ops[key])

    def wait(self, project: str, scope: str | None, name: str,
             seconds: float = WAIT_SECONDS) -> dict:
        deadline = time.monotonic() + seconds
        with self._changed:
            while True:
                op = self.get(project, scope, name)
                left = deadline - time.monotonic()
                if op["status"] == "DONE" or left <= 0:
                    return op
                self._changed.wait(left)

    def _finish(self, stored: dict, error: dict | None) -> None:
        stored.update(status="DONE", progress=100, endTime=now())
        if error:
            stored.update(copy_json(error))
        self._changed.notify_all()

    @staticmethod
    def _key(project: str, scope: str | None, name: str) -> str:
        return f"{project}/{scope or 'global'}/{name}"

    def _key_of(self, op: dict) -> str:
        project = op["selfLink"].split("/projects/", 1)[1].split("/", 1)[0]
        scope = op.get("zone") or op.get("region")
        return self._key(project, scope.rsplit("/", 1)[1] if scope else None, op["name"])

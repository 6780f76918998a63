"""`fail-next`: the next K calls of one API method answer a given Google error (replaying payloads
real users met), or succeed and end their long-running operation with it.

Methods are named by their discovery ids (`tpu.v2.json`, `compute.v1.json` as shipped in
google-api-python-client's discovery_cache). Cloud Storage is a separate emulator process
(gcp-storage-emulator) whose requests never pass through here: `storage.*` cannot be injected.
Standard library only: the CLI's `--list` imports this without the emulator's dependencies.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# The emulator's routes (server.py, apis/compute/api.py) -> discovery method id, and whether the method
# answers a long-running operation (then --in-operation applies).
TPU_METHODS: dict[str, tuple[str, bool]] = {
    "create_node": ("tpu.projects.locations.nodes.create", True),
    "list_nodes": ("tpu.projects.locations.nodes.list", False),
    "get_node": ("tpu.projects.locations.nodes.get", False),
    "delete_node": ("tpu.projects.locations.nodes.delete", True),
    "update_node": ("tpu.projects.locations.nodes.patch", True),
    "guest_attributes": ("tpu.projects.locations.nodes.getGuestAttributes", False),
    "create_qr": ("tpu.projects.locations.queuedResources.create", True),
    "list_qrs": ("tpu.projects.locations.queuedResources.list", False),
    "get_qr": ("tpu.projects.locations.queuedResources.get", False),
    "delete_qr": ("tpu.projects.locations.queuedResources.delete", True),
    "get_operation": ("tpu.projects.locations.operations.get", False),
}
COMPUTE_METHODS: dict[str, tuple[str, bool]] = {
    "insert_disk": ("compute.disks.insert", True),
    "list_disks": ("compute.disks.list", False),
    "get_disk": ("compute.disks.get", False),
    "delete_disk": ("compute.disks.delete", True),
    "insert_snapshot": ("compute.snapshots.insert", True),
    "list_snapshots": ("compute.snapshots.list", False),
    "get_snapshot": ("compute.snapshots.get", False),
    "delete_snapshot": ("compute.snapshots.delete", True),
    "zone_operation": ("compute.zoneOperations.get", False),
    "list_zone_operations": ("compute.zoneOperations.list", False),
    "zone_operation_wait": ("compute.zoneOperations.wait", False),
    "global_operation": ("compute.globalOperations.get", False),
    "global_operation_wait": ("compute.globalOperations.wait", False),
    "get_project": ("compute.projects.get", False),
    "get_region": ("compute.regions.get", False),
    "insert_instance": ("compute.instances.insert", True),
    "list_instances": ("compute.instances.list", False),
    "get_instance": ("compute.instances.get", False),
    "delete_instance": ("compute.instances.delete", True),
    "instance_guest_attributes": ("compute.instances.getGuestAttributes", False),
    "stop_instance": ("compute.instances.stop", True),
    "insert_policy": ("compute.resourcePolicies.insert", True),
    "get_policy": ("compute.resourcePolicies.get", False),
    "delete_policy": ("compute.resourcePolicies.delete", True),
    "insert_template": ("compute.instanceTemplates.insert", True),
    "get_template": ("compute.instanceTemplates.get", False),
    "delete_template": ("compute.instanceTemplates.delete", True),
    "insert_mig": ("compute.instanceGroupManagers.insert", True),
    "list_migs": ("compute.instanceGroupManagers.list", False),
    "get_mig": ("compute.instanceGroupManagers.get", False),
    "delete_mig": ("compute.instanceGroupManagers.delete", True),
    "list_managed": ("compute.instanceGroupManagers.listManagedInstances", False),
    "list_errors": ("compute.instanceGroupManagers.listErrors", False),
}
METHODS: dict[str, bool] = {mid: op for mid, op in [*TPU_METHODS.values(), *COMPUTE_METHODS.values()]}

# google.rpc.Code (google/rpc/code.proto): the `code` of a failed operation and the `status`
# name of a TPU error body.
GRPC_CODES = {"CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
              "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
              "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
              "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}
# HTTP status -> the gRPC status Google's front end pairs it with (google/rpc/code.proto's
# HTTP mapping), when the caller names none.
HTTP_TO_GRPC = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION",
                429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
# Compute answers in the older JSON-API shape, `errors: [{message, domain: "global", reason}]`
# (tensorflow/tpu#859 quotes a 403 with reason "forbidden"); these are the standard reasons of
# Google's JSON APIs for each status, used when the caller names none.
COMPUTE_REASONS = {400: "badRequest", 401: "required", 403: "forbidden", 404: "notFound",
                   409: "alreadyExists", 412: "conditionNotMet", 429: "rateLimitExceeded",
                   500: "backendError", 503: "backendError"}
HTTP_PHRASES = {400: "BAD REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT FOUND",
                409: "CONFLICT", 412: "PRECONDITION FAILED", 429: "TOO MANY REQUESTS",
                500: "INTERNAL SERVER ERROR", 503: "SERVICE UNAVAILABLE", 504: "GATEWAY TIMEOUT"}


class FaultError(ValueError):
    """A fail-next request that cannot be honoured (the server answers 400)."""


@dataclass
class Fault:
    method: str
    status: int
    message: str
    grpc_status: str
    reason: str | None
    in_operation: bool
    times: int
    domain: str | None = None  # ErrorInfo.domain (default googleapis.com)
    metadata: dict[str, str] = field(default_factory=dict)  # ErrorInfo.metadata
    quota_violations: list[dict] = field(default_factory=list)  # QuotaFailure [{subject, description}]

    @property
    def grpc_code(self) -> int:
        return GRPC_CODES[self.grpc_status]

    def details(self) -> list[dict]:
        """google.rpc.Status.details as Google's TPU bodies carry them: a google.rpc.ErrorInfo
        {reason, domain, metadata} (LOCATION_POLICY_VIOLATED with {consumer, location, service}:
        sayouzone/gemma3-sft tpu/README.md; USER_PROJECT_DENIED: lbjlaq/Antigravity-Manager#3050;
        SERVICE_DISABLED: google-gemini/deprecated-generative-ai-android#148) and a
        google.rpc.QuotaFailure {violations[{subject, description}]} (google/rpc/error_details.proto;
        SkyPilot's failover handler reads it)."""
        found: list[dict] = []
        if self.reason:
            info: dict[str, Any] = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": self.reason,
                    "domain": self.domain or "googleapis.com"}
            if self.metadata:
                info["metadata"] = dict(self.metadata)
            found.append(info)
        if self.quota_violations:
            found.append({"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                          "violations": [dict(v) for v in self.quota_violations]})
        return found

    def rpc_status(self) -> dict:
        """The google.rpc.Status an operation's `error`, or a queued resource's
        failedData.error, carries."""
        status: dict = {"code": self.grpc_code, "message": self.message}
        if self.details():
            status["details"] = self.details()
        return status

    def tpu_body(self) -> dict:
        """Google's JSON error body for the TPU API (google.rpc.Status over HTTP, with its
        details)."""
        error: dict = {"code": self.status, "message": self.message, "status": self.grpc_status}
        if self.details():
            error["details"] = self.details()
        return {"error": error}

    def compute_body(self) -> dict:
        reason = self.reason or COMPUTE_REASONS.get(self.status, "backendError")
        return {"error": {"code": self.status, "message": self.message,
                          "errors": [{"message": self.message, "domain": "global", "reason": reason}]}}

    def compute_operation_error(self) -> dict:
        """The fields a failed Compute operation carries (compute.v1 Operation: error.errors[],
        httpErrorStatusCode, httpErrorMessage)."""
        return {"error": {"errors": [{"code": self.reason or self.grpc_status, "message": self.message}]},
                "httpErrorStatusCode": self.status,
                "httpErrorMessage": HTTP_PHRASES.get(self.status, str(self.status))}


def parse(body: dict) -> Fault:
    """A fail-next request (the JSON of `POST /emulator/v1/fail-next`) checked, or FaultError."""
    method = body.get("method")
    if method not in METHODS:
        raise FaultError(f"unknown method {method!r}: `tpujob emulator fail-next --list` shows the "
                         "methods that can fail")
    status = body.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        raise FaultError("status must be an HTTP error code (400 to 599)")
    message = body.get("message")
    if not isinstance(message, str) or not message.strip():
        raise FaultError("message is required")
    grpc_status = body.get("grpc_status") or HTTP_TO_GRPC.get(status, "UNKNOWN")
    if grpc_status not in GRPC_CODES:
        raise FaultError(f"unknown grpc_status {grpc_status!r}: one of {', '.join(GRPC_CODES)}")
    times = body.get("times", 1)
    if not isinstance(times, int) or isinstance(times, bool) or times < 1:
        raise FaultError("times must be an integer >= 1")
    in_operation = bool(body.get("in_operation"))
    if in_operation and not METHODS[method]:
        raise FaultError(f"{method} answers no long-running operation: --in-operation does not apply")
    reason = body.get("reason") or None
    domain = body.get("domain") or None
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise FaultError("metadata must map strings to strings (ErrorInfo.metadata)")
    violations = body.get("quota_violations") or []
    if not isinstance(violations, list) or not all(
            isinstance(v, dict) and set(v) <= {"subject", "description"} and v.get("description")
            for v in violations):
        raise FaultError("quota_violations must be [{subject, description}] (QuotaFailure.violations)")
    if (domain or metadata) and not reason:
        raise FaultError("ErrorInfo domain and metadata need a reason")
    if method.startswith("compute.") and (domain or metadata or violations):
        # Compute answers `errors[]` (its older JSON-API shape): no source here shows its
        # ErrorInfo/QuotaFailure details, so they are not invented.
        raise FaultError("ErrorInfo metadata, domain and QuotaFailure details are replayed on "
                         "tpu.* methods only")
    return Fault(method, status, message, grpc_status, reason, in_operation, times, domain,
                 dict(metadata), [dict(v) for v in violations])


class FailNext:
    """The pending faults, one queue per method; each call of the method takes one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, Fault] = {}

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._pending[fault.method] = fault  # a new fault replaces the one still pending

    def queue(self, method: str, status: int, message: str, grpc_status: str | None = None,
              reason: str | None = None, in_operation: bool = False, times: int = 1,
              domain: str | None = None, metadata: dict | None = None,
              quota_violations: list | None = None) -> None:
        """The next `times` calls of `method` (a discovery id) answer this error, or (in_operation)
        succeed and end their operation with it (FaultError: not a fault `parse` takes)."""
        self.add(parse({"method": method, "status": status, "message": message,
                        "grpc_status": grpc_status, "reason": reason, "in_operation": in_operation,
                        "times": times, "domain": domain, "metadata": metadata,
                        "quota_violations": quota_violations}))

    def take(self, method: str) -> Fault | None:
        with self._lock:
            fault = self._pending.get(method)
            if fault is None:
                return None
            fault.times -= 1
            if fault.times <= 0:
                del self._pending[method]
            return fault

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def pending(self) -> list[dict]:
        with self._lock:
            return [{"method": f.method, "status": f.status, "grpcStatus": f.grpc_status,
                     "inOperation": f.in_operation, "timesLeft": f.times}
                    for f in sorted(self._pending.values(), key=lambda f: f.method)]

"""Disks and snapshots over google-cloud-compute (REST), the disks attached to TPU nodes, and
the project's Compute quotas (`doctor`); with the Compute operations' plumbing that
compute_tpu.py shares (`operation_failure`, `typed_error`, `rfc3339`).

compute_v1's own `operation.result()` polls through an operations client it builds with
Google's default endpoint, whatever `client_options` say (against the emulator it tried the
internet): operations are waited on here with our own Zone/GlobalOperationsClient built with
the same options, one code path for Google and the emulator. Import lazily: compute_v1 costs
about 2.6 s to import.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tpujob.cloud.api_calls import classify, emulator_settings, invoke, new_retry
from tpujob.errors import CloudError, NotFoundError

COMPUTE = "compute.googleapis.com"


@dataclass(frozen=True)
class DiskInfo:
    name: str
    zone: str
    type: str  # pd-balanced, ...
    size_gb: int
    status: str
    source_snapshot: str = ""  # short names
    source_disk: str = ""
    users: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)  # tpujob-job: the job owning a clone
    access_mode: str = ""  # Hyperdisk only: READ_WRITE_SINGLE, READ_ONLY_MANY, READ_WRITE_MANY
    created: float | None = None  # epoch seconds of creationTimestamp

    def to_json_dict(self) -> dict[str, Any]:
        return {"name": self.name, "zone": self.zone, "type": self.type, "size_gb": self.size_gb,
                "status": self.status, "source_snapshot": self.source_snapshot,
                "source_disk": self.source_disk, "users": list(self.users),
                "labels": dict(self.labels), "access_mode": self.access_mode}


@dataclass(frozen=True)
class QuotaInfo:
    """One Quota of a Region's or Project's list: `metric` is the string Google sent (a string
    field in compute_v1.Quota, so a metric the client's Quota.Metric enum lacks arrives as is)."""
    metric: str
    limit: float
    usage: float


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    source_disk: str  # short name
    status: str
    labels: dict[str, str] = field(default_factory=dict)
    created: float | None = None  # epoch seconds of creationTimestamp
    storage_bytes: int = 0  # what the snapshot's storage is billed on


@dataclass(frozen=True)
class NodeDisk:
    node: str
    source: str  # projects/P/zones/Z/disks/NAME
    read_only: bool


def disk_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/disks/{name}"


def _short(ref: str) -> str:
    return ref.rstrip("/").rsplit("/", 1)[-1] if ref else ""


class GcpCompute:
    """Snapshots, clones, disks; the disks TPU nodes hold (attached when GcpCloud creates them).
    `api_calls` counts every request sent."""

    def __init__(self, endpoint: str | None = None, credentials: Any = None,
                 tpu_endpoint: str | None = None, retry_initial: float = 1.0,
                 retry_maximum: float = 30.0, retry_deadline: float = 300.0,
                 labels: dict[str, str] | None = None):
        options = {"api_endpoint": endpoint} if endpoint else None
        kwargs = dict(transport="rest", credentials=credentials, client_options=options)
        self._disks = compute_v1.DisksClient(**kwargs)
        self._instances = compute_v1.InstancesClient(**kwargs)
        self._snapshots = compute_v1.SnapshotsClient(**kwargs)
        self._zone_ops = compute_v1.ZoneOperationsClient(**kwargs)
        self._global_ops = compute_v1.GlobalOperationsClient(**kwargs)
        self._credentials = credentials
        self._options = options
        self._tpu_endpoint = tpu_endpoint
        self._tpu: Any = None
        self._retry = new_retry(retry_initial, retry_maximum, retry_deadline)
        # Put on every disk and snapshot created (the store's id), under the caller's labels.
        self.labels = dict(labels or {})
        self.api_calls = 0

    @classmethod
    def for_emulator(cls, endpoint: str, tpu_endpoint: str | None = None,
                     labels: dict[str, str] | None = None) -> GcpCompute:
        return cls(endpoint=endpoint, tpu_endpoint=tpu_endpoint or endpoint,
                   **emulator_settings(polls=False, labels=labels))

    # ---- snapshots --------------------------------------------------------------------------

    def create_snapshot(self, project: str, zone: str, disk: str, name: str,
                        labels: dict[str, str] | None = None, timeout: float = 1800.0
                        ) -> SnapshotInfo:
        what = f"snapshotting disk {disk} as {name}"
        snapshot = compute_v1.Snapshot(name=name, source_disk=disk_path(project, zone, disk),
                                       labels={**self.labels, **(labels or {})})
        op = self._call(what, self._snapshots.insert_unary, project=project,
                        snapshot_resource=snapshot)
        self._wait(op, what, project, None, timeout)
        return self.get_snapshot(project, name)

    def get_snapshot(self, project: str, name: str) -> SnapshotInfo:
        return _snapshot(self._call(f"getting snapshot {name}", self._snapshots.get,
                                    project=project, snapshot=name))

    def list_snapshots(self, project: str) -> list[SnapshotInfo]:
        items = self._call("listing snapshots", lambda: list(self._snapshots.list(project=project)))
        return [_snapshot(s) for s in items]

    def delete_snapshot(self, project: str, name: str, timeout: float = 600.0) -> None:
        what = f"deleting snapshot {name}"
        try:
            op = self._call(what, self._snapshots.delete_unary, project=project, snapshot=name)
        except NotFoundError:
            return
        self._wait(op, what, project, None, timeout)

    # ---- disks ------------------------------------------------------------------------------

    def create_disk(self, project: str, zone: str, name: str, *, disk_type: str,
                    snapshot: str | None = None, source_disk: str | None = None,
                    size_gb: int | None = None, labels: dict[str, str] | None = None,
                    read_only: bool = False, timeout: float = 1800.0) -> DiskInfo:
        """A new disk: empty, or a clone of a snapshot (short name or path) or of a disk.
        `read_only`: for many hosts to attach read-only (a Hyperdisk's access mode)."""
        disk = compute_v1.Disk(name=name, type_=f"zones/{zone}/diskTypes/{disk_type}",
                               labels={**self.labels, **(labels or {})})
        if size_gb:
            disk.size_gb = size_gb
        if snapshot:
            disk.source_snapshot = snapshot if "/" in snapshot else \
                f"projects/{project}/global/snapshots/{snapshot}"
        if source_disk:
            disk.source_disk = source_disk if "/" in source_disk else \
                disk_path(project, zone, source_disk)
        if disk_type.startswith("hyperdisk-"):
            # Only Hyperdisk has an access mode (compute.v1.json Disk.accessMode). Google's TPU
            # page "Attach durable block storage": a disk the TPU attaches `read-write` is
            # READ_WRITE_SINGLE (a master), one attached `read-only` READ_ONLY_MANY (a clone
            # for every host of a pod); Compute refuses the other pairings.
            disk.access_mode = "READ_ONLY_MANY" if read_only else "READ_WRITE_SINGLE"
        what = f"creating disk {name}"
        op = self._call(what, self._disks.insert_unary, project=project, zone=zone,
                        disk_resource=disk)
        self._wait(op, what, project, zone, timeout)
        return self.get_disk(project, zone, name)

    def get_disk(self, project: str, zone: str, name: str) -> DiskInfo:
        return _disk(self._call(f"getting disk {name}", self._disks.get, project=project,
                                zone=zone, disk=name))

    def find_disk(self, project: str, zone: str, name: str) -> DiskInfo | None:
        try:
            return self.get_disk(project, zone, name)
        except NotFoundError:
            return None

    def list_disks(self, project: str, zone: str) -> list[DiskInfo]:
        items = self._call("listing disks",
                           lambda: list(self._disks.list(project=project, zone=zone)))
        return [_disk(d) for d in items]

    def delete_disk(self, project: str, zone: str, name: str, timeout: float = 600.0) -> None:
        """Delete the disk; a missing disk is not an error."""
        what = f"deleting disk {name}"
        try:
            op = self._call(what, self._disks.delete_unary, project=project, zone=zone, disk=name)
        except NotFoundError:
            return
        self._wait(op, what, project, zone, timeout)

    # ---- TPU nodes --------------------------------------------------------------------------

    def node_disks(self, project: str, zone: str) -> list[NodeDisk]:
        """Every data disk attached to a TPU node or a Compute Engine VM (a TPU VM of the
        Compute Engine path, or any other) of the zone, with its mode: one list of each."""
        from google.cloud import tpu_v2

        nodes = self._call("listing nodes", lambda: list(self._tpu_client().list_nodes(
            parent=f"projects/{project}/locations/{zone}")))
        instances = self._call("listing instances", lambda: list(self._instances.list(project=project, zone=zone)))
        return [NodeDisk(_short(n.name), d.source_disk,
                         d.mode == tpu_v2.AttachedDisk.DiskMode.READ_ONLY)
                for n in nodes for d in n.data_disks] + \
            [NodeDisk(i.name, disk_path(project, zone, _short(d.source)), d.mode == "READ_ONLY")
             for i in instances for d in i.disks if not d.boot and d.source]

    # ---- quotas ------------------------------------------------------------------------------

    def quotas(self, project: str, region: str | None = None) -> list[QuotaInfo]:
        """compute.regions.get's `quotas` (None: compute.projects.get's, the global ones such as
        GPUS_ALL_REGIONS). Its clients are built here only: no other call needs them."""
        kwargs = dict(transport="rest", credentials=self._credentials, client_options=self._options)
        if region is None:
            found = self._call(f"reading the quotas of project {project}",
                               compute_v1.ProjectsClient(**kwargs).get, project=project)
        else:
            found = self._call(f"reading the quotas of region {region}",
                               compute_v1.RegionsClient(**kwargs).get, project=project, region=region)
        return [QuotaInfo(q.metric, q.limit, q.usage) for q in found.quotas]

    def _tpu_client(self) -> Any:
        from google.cloud import tpu_v2

        if self._tpu is None:
            options = {"api_endpoint": self._tpu_endpoint} if self._tpu_endpoint else None
            self._tpu = tpu_v2.TpuClient(transport="rest", credentials=self._credentials,
                                         client_options=options)
        return self._tpu

    # ---- plumbing ---------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def attempt() -> Any:
            self.api_calls += 1
            return fn(*args, **kwargs)

        return invoke(self._retry, what, attempt, COMPUTE)

    def _wait(self, op: Any, what: str, project: str, zone: str | None, timeout: float) -> None:
        """`wait` on our own operations client until DONE (each call blocks up to ~2 min)."""
        deadline = time.monotonic() + timeout
        while op.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise CloudError(f"{what}: operation {op.name} not done after {timeout:g} s")
            if zone:
                op = self._call(what, self._zone_ops.wait, project=project, zone=zone,
                                operation=op.name)
            else:
                op = self._call(what, self._global_ops.wait, project=project, operation=op.name)
        failure = operation_failure(op, what)
        if failure is not None:
            raise failure


def operation_failure(op: Any, what: str, create: bool = False) -> Exception | None:
    """The typed error a DONE Compute operation ended with, or None if it ended well."""
    if not (op.error and op.error.errors):
        return None
    first = op.error.errors[0]
    # A failed operation carries the HTTP status the request would have had
    # (compute.v1 Operation.httpErrorStatusCode): the same classifier as a direct answer.
    return typed_error(first.code, first.message, what, op.http_error_status_code or None, create)


def typed_error(code: str, message: str, what: str, http_status: int | None = None,
                create: bool = True) -> Exception:
    """Compute's `{code, message}` error typed by the one classifier (api_calls.classify,
    cloud/error_rules.RULES), with its HTTP status when it has one: a failed operation's
    (Operation.httpErrorStatusCode), or none (an operation without it; a MIG's
    lastAttempt, listErrors or bulk progress check, which carry no status: compute.v1
    discovery). Without a status the code and wording alone decide (a stockout code is a
    StockoutError), never a plain CloudError."""
    errors = [{"reason": code, "message": message}]
    err = gexc.from_http_status(http_status, message, errors=errors) if http_status \
        else gexc.GoogleAPICallError(message, errors=errors)
    return classify(what, err, COMPUTE, create_operation=create)


def _disk(d: Any) -> DiskInfo:
    return DiskInfo(name=d.name, zone=_short(d.zone), type=_short(d.type_),
                    size_gb=int(d.size_gb), status=d.status,
                    source_snapshot=_short(d.source_snapshot), source_disk=_short(d.source_disk),
                    users=tuple(_short(u) for u in d.users), labels=dict(d.labels),
                    access_mode=d.access_mode, created=rfc3339(d.creation_timestamp))


def _snapshot(s: Any) -> SnapshotInfo:
    return SnapshotInfo(name=s.name, source_disk=_short(s.source_disk), status=s.status,
                        labels=dict(s.labels), created=rfc3339(s.creation_timestamp),
                        storage_bytes=int(s.storage_bytes or 0))


def rfc3339(stamp: str) -> float | None:
    """Epoch seconds of Compute's creationTimestamp ("2024-05-01T10:00:00.000-07:00")."""
    if not stamp:
        return None
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

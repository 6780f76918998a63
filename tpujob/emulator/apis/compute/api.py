"""The emulated Compute Engine v1 subset apart from instances and MIGs: disks, snapshots, zone
and global operations, projects.get and regions.get (routes.py routes the paths here).

Each disk is a directory under
`STATE/compute/disks/PROJECT/ZONE/NAME`; a snapshot is a copy of one under
`STATE/compute/snapshots/PROJECT/NAME`; a clone copies a snapshot or a disk. Operations finish
before the call returns (copies are local), so `wait` answers at once.

What Google refuses about a disk's access mode and its attachment to a TPU: disk_rules.py. How
an attached disk appears on every emulated host (/dev/disk/by-id/google-NAME): machines/disks.py.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import threading
import uuid
import zlib
from typing import Any

from tpujob.emulator.apis.bodies import check_id, copy_json, now
from tpujob.emulator.apis.compute.disk_rules import access_mode_at_insert, check_attach
from tpujob.emulator.apis.compute.operations import API_ROOT, ComputeOperations
from tpujob.emulator.apis.compute.quotas import Quotas
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.labels import check_compute_labels
from tpujob.emulator.apis.oslogin import OsLogin
from tpujob.emulator.machines import apt
from tpujob.emulator.machines.disks import gcsfuse_shim, prepare_hosts

_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+")  # us-central1, europe-west4, ...
DISK_TYPES = ("pd-standard", "pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-ml",
              "hyperdisk-balanced")
DEFAULT_SIZE_GB = 10


def short(ref: str) -> str:
    """The last path element of a resource name or URL."""
    return ref.rstrip("/").rsplit("/", 1)[-1]


class ComputeEmulator:
    """Disks and snapshots; methods raise ApiError, return the API's JSON."""

    def __init__(self, root: pathlib.Path, oslogin: OsLogin, storage_endpoint: str | None = None):
        self.root = pathlib.Path(root)
        self.storage_endpoint = storage_endpoint  # for the hosts' gcsfuse
        # Unknown whether Google's TPU VM images ship gcsfuse (every peer installs it:
        # e.g. google/maxtext setup.sh); `tpujob emulator image --without-gcsfuse` boots hosts without.
        self.image_gcsfuse = True
        self._disks: dict[tuple[str, str, str], dict] = {}
        self._snapshots: dict[tuple[str, str], dict] = {}
        self.operations = ComputeOperations()
        self._lock = threading.RLock()
        self.oslogin = oslogin  # the project's enable-oslogin
        self.quotas = Quotas()  # regions.get's and projects.get's quota lists

    # ---- the project -------------------------------------------------------------------------

    def get_project(self, project: str) -> dict:
        """compute.projects.get: the Project fields tpujob reads (compute.v1.json revision
        20261106, Project and Metadata): commonInstanceMetadata holds `enable-oslogin` while
        `tpujob emulator oslogin on` is set, as a project with OS Login enabled shows it."""
        items: list[dict[str, Any]] = self.oslogin.project_metadata(project)
        return {"kind": "compute#project", "name": project, "id": str(zlib.crc32(project.encode())),
                "selfLink": f"{API_ROOT}/projects/{project}",
                "commonInstanceMetadata": {"kind": "compute#metadata", "items": items,
                                           "fingerprint": "dGVzdA=="},
                "quotas": self.quotas.of(project)}  # Project.quotas[]: the global ones (quotas.py)

    def get_region(self, project: str, region: str) -> dict:
        """compute.regions.get: a Region (compute.v1 Region schema: name, status, quotas[] of
        Quota {metric, limit, usage}); a name that is no region's is Google's 404."""
        if not _REGION.fullmatch(region):
            raise ApiError(404, f"The resource 'projects/{project}/regions/{region}' was not found")
        return {"kind": "compute#region", "id": str(zlib.crc32(region.encode())), "name": region,
                "status": "UP", "selfLink": f"{API_ROOT}/projects/{project}/regions/{region}",
                "quotas": self.quotas.of(project, region)}

    # ---- paths ------------------------------------------------------------------------------

    def disk_dir(self, project: str, zone: str, name: str) -> pathlib.Path:
        return self.root / "disks" / project / zone / name

    def snapshot_dir(self, project: str, name: str) -> pathlib.Path:
        return self.root / "snapshots" / project / name

    # ---- disks ------------------------------------------------------------------------------

    def insert_disk(self, project: str, zone: str, body: dict) -> dict:
        name = body.get("name", "")
        check_id(name, "disk name")
        check_compute_labels(body.get("labels", {}))
        disk_type = short(body.get("type") or "pd-standard")
        if disk_type not in DISK_TYPES:
            raise ApiError(400, f"Invalid value for field 'resource.type': {disk_type!r}")
        access_mode = access_mode_at_insert(disk_type, body)
        with self._lock:
            if (project, zone, name) in self._disks:
                raise ApiError(409, f"The resource 'projects/{project}/zones/{zone}/disks/{name}' "
                                    "already exists")
            source = self._source_dir(project, body)
            target = self.disk_dir(project, zone, name)
            shutil.rmtree(target, ignore_errors=True)
            if source is None:
                target.mkdir(parents=True)
            else:
                shutil.copytree(source, target, symlinks=True)
            link = f"{API_ROOT}/projects/{project}/zones/{zone}/disks/{name}"
            disk = {"kind": "compute#disk", "id": str(uuid.uuid4().int % 2**63), "name": name,
                    "zone": f"{API_ROOT}/projects/{project}/zones/{zone}", "selfLink": link,
                    "type": f"{API_ROOT}/projects/{project}/zones/{zone}/diskTypes/{disk_type}",
                    "sizeGb": str(body.get("sizeGb") or DEFAULT_SIZE_GB), "status": "READY",
                    "creationTimestamp": now()}
            for key in ("sourceSnapshot", "sourceDisk", "description", "labels"):
                if body.get(key):
                    disk[key] = body[key]
            if access_mode:
                disk["accessMode"] = access_mode
            self._disks[(project, zone, name)] = disk
            return self._done_op(project, zone, "insert", link)

    def get_disk(self, project: str, zone: str, name: str) -> dict:
        with self._lock:
            return copy_json(self._disk(project, zone, name))

    def list_disks(self, project: str, zone: str) -> dict:
        with self._lock:
            items = [copy_json(d) for (p, z, _), d in sorted(self._disks.items())
                     if (p, z) == (project, zone)]
        return {"kind": "compute#diskList", "items": items}

    def delete_disk(self, project: str, zone: str, name: str) -> dict:
        with self._lock:
            disk = self._disk(project, zone, name)
            if disk.get("users"):
                raise ApiError(400, f"The disk resource '{disk['selfLink']}' is already being used "
                                    f"by '{disk['users'][0]}'", status="resourceInUseByAnotherResource")
            del self._disks[(project, zone, name)]
            shutil.rmtree(self.disk_dir(project, zone, name), ignore_errors=True)
            return self._done_op(project, zone, "delete", disk["selfLink"])

    # ---- snapshots --------------------------------------------------------------------------

    def insert_snapshot(self, project: str, body: dict) -> dict:
        name = body.get("name", "")
        check_id(name, "snapshot name")
        check_compute_labels(body.get("labels", {}))
        source = body.get("sourceDisk")
        if not source:
            raise ApiError(400, "Required field 'resource.sourceDisk' not specified")
        with self._lock:
            if (project, name) in self._snapshots:
                raise ApiError(409, f"The resource 'projects/{project}/global/snapshots/{name}' "
                                    "already exists")
            disk_project, zone, disk_name = _disk_ref(project, source)
            disk = self._disk(disk_project, zone, disk_name)
            target = self.snapshot_dir(project, name)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(self.disk_dir(disk_project, zone, disk_name), target, symlinks=True)
            link = f"{API_ROOT}/projects/{project}/global/snapshots/{name}"
            self._snapshots[(project, name)] = {
                "kind": "compute#snapshot", "id": str(uuid.uuid4().int % 2**63), "name": name,
                "selfLink": link, "sourceDisk": disk["selfLink"], "diskSizeGb": disk["sizeGb"],
                "status": "READY", "storageBytes": str(_size(target)),
                "creationTimestamp": now(), **({"labels": body["labels"]} if body.get("labels")
                                               else {})}
            return self._done_op(project, None, "insert", link)

    def get_snapshot(self, project: str, name: str) -> dict:
        with self._lock:
            return copy_json(self._snapshot(project, name))

    def list_snapshots(self, project: str) -> dict:
        with self._lock:
            items = [copy_json(s) for (p, _), s in sorted(self._snapshots.items()) if p == project]
        return {"kind": "compute#snapshotList", "items": items}

    def delete_snapshot(self, project: str, name: str) -> dict:
        with self._lock:
            snapshot = self._snapshot(project, name)
            del self._snapshots[(project, name)]
            shutil.rmtree(self.snapshot_dir(project, name), ignore_errors=True)
            return self._done_op(project, None, "delete", snapshot["selfLink"])

    def failed_operation(self, project: str, zone: str | None, kind: str, target: str,
                         error: dict) -> dict:
        """A DONE operation that changed nothing and carries `error` (fail-next --in-operation)."""
        op = self.operations.new(project, zone, kind, target, done=False)
        self.operations.finish(op, error)
        return self.operations.get(project, zone, op["name"])

    def operation(self, project: str, zone: str | None, name: str) -> dict:
        return self.operations.get(project, zone, name)

    # ---- attachments (called by the TPU emulator) --------------------------------------------

    def check_types(self, data_disks: list[dict], accelerator_type: str) -> None:
        """Each disk exists, and its type and access mode suit the TPU and the attach mode."""
        with self._lock:
            for entry in data_disks:
                disk = self._attachable(entry)
                check_attach(disk, entry.get("mode") in ("READ_ONLY", 2), accelerator_type)

    def attachments(self, node_name: str, data_disks: list[dict], num_hosts: int
                    ) -> list[tuple[pathlib.Path, str, bool]]:
        """Check a node's dataDisks as Google would; [(directory, disk name, read_only)]."""
        found = []
        for entry in data_disks:
            ref = entry.get("sourceDisk", "")
            read_only = entry.get("mode", "READ_WRITE") in ("READ_ONLY", 2)
            project, zone, name = _disk_ref("", ref)
            with self._lock:
                disk = self._attachable(entry)
                if not read_only and num_hosts > 1:
                    raise ApiError(400, f"disk {name}: a multi-host TPU can attach a disk only "
                                        "in READ_ONLY mode")
                for user, mode in disk.get("tpujobModes", {}).items():
                    if user != node_name and (mode == "READ_WRITE" or not read_only):
                        raise ApiError(400, f"The disk resource '{disk['selfLink']}' is already "
                                            f"being used by '{user}' in {mode} mode",
                                       status="resourceInUseByAnotherResource")
            found.append((self.disk_dir(project, zone, name), name, read_only))
        return found

    def mark_attached(self, node_name: str, data_disks: list[dict]) -> None:
        with self._lock:
            for entry in data_disks:
                disk = self._disks.get(_disk_ref("", entry.get("sourceDisk", "")))
                if disk is not None:
                    mode = "READ_ONLY" if entry.get("mode") in ("READ_ONLY", 2) else "READ_WRITE"
                    disk.setdefault("tpujobModes", {})[node_name] = mode
                    disk["users"] = sorted(disk["tpujobModes"])

    def prepare(self, host_pids: list[list[int]], attachments: list) -> None:
        """The node's hosts get its disks, apt's tools (apt.py), and gcsfuse when Cloud Storage
        runs: on PATH if the image ships it (`image_gcsfuse`), else for `apt-get install`."""
        tools = {name: apt.shim(name) for name in ("apt-get", "curl", "lsb_release")}
        if self.storage_endpoint:
            tools[apt.GCSFUSE_PACKAGE] = gcsfuse_shim(self.storage_endpoint)
            if self.image_gcsfuse:
                tools["gcsfuse"] = tools[apt.GCSFUSE_PACKAGE]
        prepare_hosts(host_pids, attachments, tools)

    def release(self, node_name: str) -> None:
        with self._lock:
            for disk in self._disks.values():
                if disk.get("tpujobModes", {}).pop(node_name, None):
                    disk["users"] = sorted(disk["tpujobModes"])
                    if not disk["users"]:
                        disk.pop("users")
                        disk.pop("tpujobModes")

    # ---- helpers ----------------------------------------------------------------------------

    def _source_dir(self, project: str, body: dict) -> pathlib.Path | None:
        if body.get("sourceSnapshot") and body.get("sourceDisk"):
            raise ApiError(400, "give sourceSnapshot or sourceDisk, not both")
        if body.get("sourceSnapshot"):
            ref = body["sourceSnapshot"]
            parts = ref.split("/")
            snap_project = parts[parts.index("projects") + 1] if "projects" in parts else project
            self._snapshot(snap_project, short(ref))
            return self.snapshot_dir(snap_project, short(ref))
        if body.get("sourceDisk"):
            disk_project, zone, name = _disk_ref(project, body["sourceDisk"])
            self._disk(disk_project, zone, name)
            return self.disk_dir(disk_project, zone, name)
        return None

    def _disk(self, project: str, zone: str, name: str) -> dict:
        disk = self._disks.get((project, zone, name))
        if disk is None:
            raise ApiError(404, f"The resource 'projects/{project}/zones/{zone}/disks/{name}' "
                                "was not found")
        return disk

    def _attachable(self, entry: dict) -> dict:
        """The disk a TPU node's dataDisks entry names. A disk that does not exist refuses the
        whole create (or update) call, with nothing created: 404 NOT_FOUND in Compute's words
        for a missing disk, "The resource 'projects/P/zones/Z/disks/D' was not found" (gcloud
        quotes it, e.g. tf-encrypted/tf-encrypted#139; dstack's TPU volumes, dstackai/dstack#2140,
        fail the attachment with "Persistent disk not found"). The TPU API's own wrapping of it
        is quoted nowhere public we found; Compute's instances.insert words the same case "Invalid
        value for field 'resource.disks[0].source': '...'. The referenced disk resource cannot be
        found." (400; arunoda/fastai-shell#5)."""
        return self._disk(*_disk_ref("", entry.get("sourceDisk", "")))

    def _snapshot(self, project: str, name: str) -> dict:
        snapshot = self._snapshots.get((project, name))
        if snapshot is None:
            raise ApiError(404, f"The resource 'projects/{project}/global/snapshots/{name}' "
                                "was not found")
        return snapshot

    def _done_op(self, project: str, zone: str | None, kind: str, target: str) -> dict:
        return self.operations.new(project, zone, kind, target)


def _disk_ref(project: str, ref: str) -> tuple[str, str, str]:
    """(project, zone, name) of `projects/P/zones/Z/disks/N` (or a URL, or `zones/Z/disks/N`)."""
    parts = ref.split("/")
    try:
        zone = parts[parts.index("zones") + 1]
        name = parts[parts.index("disks") + 1]
    except (ValueError, IndexError):
        raise ApiError(400, f"{ref!r} is not a disk name like projects/P/zones/Z/disks/NAME") \
            from None
    found_project = parts[parts.index("projects") + 1] if "projects" in parts else project
    if not found_project:
        raise ApiError(400, f"{ref!r} names no project")
    return found_project, zone, name


def _size(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())

"""The Cloud protocol over Google's official TPU client (google.cloud.tpu_v2, REST transport).

The same code talks to Google (Application Default Credentials) and to the local emulator
(anonymous credentials, an `http://127.0.0.1:PORT` endpoint). Here: the requests, their
retries and operations; what the answers say (a Slice, a TpuResource, health and maintenance)
is read in tpujob.cloud.tpu_resources. Import this module lazily: it pulls in google-cloud-tpu.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from google.cloud import tpu_v2
from google.protobuf import duration_pb2

from tpujob.catalogue import TPU_VM, Api
from tpujob.cloud import multislice
from tpujob.cloud.api_calls import classify, emulator_settings, invoke, new_retry, status_error
from tpujob.cloud.base import Slice, SlicePhase, SliceRequest, TpuResource
from tpujob.cloud.tpu_resources import RawNodes, read_resources, read_slice, short
from tpujob.errors import CloudError, CloudRefused, ConfigError, ConflictError, NotFoundError, UsageError
from tpujob.names import node_names


class GcpCloud:
    """Cloud TPU slices through tpu_v2.TpuClient. `api_calls` counts every request sent."""

    def __init__(self, endpoint: str | None = None, credentials: Any = None,
                 retry_initial: float = 1.0, retry_maximum: float = 30.0,
                 retry_deadline: float = 300.0, poll_interval: float = 2.0,
                 labels: dict[str, str] | None = None):
        options = {"api_endpoint": endpoint} if endpoint else None
        self._client = tpu_v2.TpuClient(transport="rest", credentials=credentials,
                                        client_options=options)
        self._retry = new_retry(retry_initial, retry_maximum, retry_deadline)
        self.poll_interval = poll_interval
        # Put on every node created (the store's id), under the request's own labels.
        self.labels = dict(labels or {})
        self.api_calls = 0
        self._count_lock = threading.Lock()  # a sweep's act workers share one client
        self._raw = RawNodes(self._client)

    @classmethod
    def for_emulator(cls, endpoint: str, **kwargs: Any) -> GcpCloud:
        return cls(endpoint=endpoint, **emulator_settings(**kwargs))

    def for_api(self, api: Api) -> GcpCloud:
        if api != TPU_VM:
            raise ConfigError(f"a job on the {api!r} API needs tpujob.cloud.apis.TpuApis, not the TPU API alone")
        return self

    # ---- create -----------------------------------------------------------------------------

    def create_node(self, request: SliceRequest, timeout: float = 1800.0) -> Slice:
        """Create the node directly and wait for its operation (READY, or StockoutError)."""
        operation = self.request_node(request)
        with _parent_must_exist(request):
            self._wait_for(operation, f"creating node {request.name}", timeout, create=True)
        return self.get_slice(request.project, request.zone, request.name, slices=request.slices)

    def request_node(self, request: SliceRequest) -> str:
        """Ask for the node and return its create operation's name, without waiting for it: the
        node is listed (CREATING, then READY) as it comes up, and the operation is read only
        where the node is not (a create that ended with an error: a stockout leaves no node)."""
        node = self._node(request)
        names = list(request.node_ids) or node_names(request.name, request.slices)
        operations = []
        for name in names:
            try:
                with _parent_must_exist(request):
                    op = self._call(f"creating node {name}", self._client.create_node, parent=_parent(request),
                                    node_id=name, node=node)
            except ConflictError:
                if len(names) == 1:
                    raise
                continue  # this node of several exists: an earlier try of this create made it
            operations.append(op.operation.name)
        if not operations:
            raise ConflictError(f"nodes {', '.join(names)} exist already")
        return " ".join(operations)

    def operation_done(self, name: str, what: str, create: bool = False) -> bool:
        """Whether the operation has ended well (False: still running); one that ended with an
        error raises it, typed (`create`: a node create's, whose INTERNAL end is a capacity
        miss); NotFoundError for an operation the API no longer knows."""
        done = True
        for one in name.split():  # a multislice create's: every node's
            current = self._call(what, self._client.get_operation, request={"name": one})
            if current.done and current.HasField("error"):
                raise classify(what, status_error(current.error), create_operation=create)
            done = done and current.done
        return done

    def create_queued_resource(self, request: SliceRequest, timeout: float = 300.0) -> Slice:
        """Queue the request (the operation ends once queued); the slice turns READY later, as
        get_slice/list_slices observe (the reconcile sweep polls them)."""
        if request.provisioning == "preemptible":
            raise UsageError("preemptible TPUs cannot be queued; use spot or on-demand")
        spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=_parent(request), node=self._node(request))
        if request.slices > 1:  # nodes NAME-0 .. NAME-(N-1), as tpujob.names.node_names reads them
            spec.multislice_params = tpu_v2.QueuedResource.Tpu.NodeSpec.MultisliceParams(
                node_count=request.slices, node_id_prefix=request.name)
        else:
            spec.node_id = request.name
        qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]))
        if request.provisioning == "spot":
            qr.spot = tpu_v2.QueuedResource.Spot()
        if request.valid_until_seconds:
            qr.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(
                valid_until_duration=duration_pb2.Duration(seconds=request.valid_until_seconds))
        what = f"queueing {request.name}"
        with _parent_must_exist(request):
            op = self._call(what, self._client.create_queued_resource, parent=_parent(request),
                            queued_resource_id=request.name, queued_resource=qr)
            self._wait(op, what, timeout)
        return self.get_slice(request.project, request.zone, request.name, slices=request.slices)

    def _node(self, request: SliceRequest) -> tpu_v2.Node:
        metadata = dict(request.metadata)
        if request.ssh_keys:
            metadata["ssh-keys"] = "\n".join(filter(None, [metadata.get("ssh-keys"),
                                                           *request.ssh_keys]))
        node = tpu_v2.Node(
            accelerator_type=request.accelerator_type, runtime_version=request.runtime_version,
            labels={**self.labels, **request.labels}, metadata=metadata,
            data_disks=[tpu_v2.AttachedDisk(
                source_disk=d.source,
                mode=(tpu_v2.AttachedDisk.DiskMode.READ_ONLY if d.read_only
                      else tpu_v2.AttachedDisk.DiskMode.READ_WRITE))
                for d in request.data_disks],
            # Without enableExternalIps the workers get internal addresses only (the API's
            # default is false): unreachable from outside the VPC, and no PyPI without NAT.
            network_config=tpu_v2.NetworkConfig(
                enable_external_ips=request.external_ips, network=request.network or "",
                subnetwork=request.subnetwork or ""),
            tags=list(request.tags))
        # Queued resources take spot through their own tier (set by the caller), not here.
        if request.provisioning == "spot" and not request.queued:
            node.scheduling_config = tpu_v2.SchedulingConfig(spot=True)
        elif request.provisioning == "preemptible":
            node.scheduling_config = tpu_v2.SchedulingConfig(preemptible=True)
        elif request.provisioning not in ("spot", "on-demand"):
            raise UsageError(f"unknown provisioning {request.provisioning!r}: "
                             "use spot, on-demand or preemptible")
        return node

    # ---- read -------------------------------------------------------------------------------

    def get_node(self, project: str, zone: str, name: str) -> Slice:
        node = self._call(f"getting node {name}", self._client.get_node,
                          name=f"{_loc(project, zone)}/nodes/{name}")
        return read_slice(name, zone, node, None)

    def list_nodes(self, project: str, zone: str) -> list[Slice]:
        nodes = self._call(f"listing nodes in {zone}", _all, self._client.list_nodes,
                           parent=_loc(project, zone))
        return [read_slice(short(n.name), zone, n, None) for n in nodes]

    def get_queued_resource(self, project: str, zone: str, name: str) -> Slice:
        qr = self._call(f"getting queued resource {name}", self._client.get_queued_resource,
                        name=f"{_loc(project, zone)}/queuedResources/{name}")
        return read_slice(name, zone, None, qr)

    def list_queued_resources(self, project: str, zone: str) -> list[Slice]:
        qrs = self._call(f"listing queued resources in {zone}", _all,
                         self._client.list_queued_resources, parent=_loc(project, zone))
        return [read_slice(short(q.name), zone, None, q) for q in qrs]

    def get_slice(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> Slice:
        """The slice's node and queued resource together; phase GONE when neither exists.
        Several slices (multislice): their nodes as one (`nodes`: an elastic attempt's own), from
        one listing of the zone.

        The queued resource is read first: it turns ACTIVE only once its node exists, so a node
        created between the two reads cannot show as "ACTIVE without a node" (read as lost)."""
        if slices > 1 or nodes:
            listed = self.list_slices(project, zone)
            return (multislice.pick(listed.get, name, zone, slices, list(nodes))
                    or Slice(name=name, zone=zone, phase=SlicePhase.GONE))
        loc = _loc(project, zone)
        qr = self._get_or_none(f"getting queued resource {name}", self._client.get_queued_resource,
                               f"{loc}/queuedResources/{name}")
        with self._raw.keeping() as raw:
            node = self._get_or_none(f"getting node {name}", self._client.get_node,
                                     f"{loc}/nodes/{name}")
        return read_slice(name, zone, node, qr, raw)

    def list_slices(self, project: str, zone: str) -> dict[str, Slice]:
        """Every slice in the zone from one queued-resources list and one nodes list, in that
        order (see get_slice)."""
        loc = _loc(project, zone)
        qrs = {short(q.name): q for q in self._call(
            f"listing queued resources in {zone}", _all, self._client.list_queued_resources,
            parent=loc)}
        with self._raw.keeping() as raw:  # the same answer's upcomingMaintenance: no extra call
            nodes = {short(n.name): n for n in self._call(
                f"listing nodes in {zone}", _all, self._client.list_nodes, parent=loc)}
        return {name: read_slice(name, zone, nodes.get(name), qrs.get(name), raw)
                for name in sorted(nodes.keys() | qrs.keys())}

    def list_tpu_resources(self, project: str, zone: str) -> list[TpuResource]:
        """Every queued resource and node of the zone (tpu_resources.read_resources): one list
        of each."""
        loc = _loc(project, zone)
        qrs = self._call(f"listing queued resources in {zone}", _all,
                         self._client.list_queued_resources, parent=loc)
        nodes = self._call(f"listing nodes in {zone}", _all, self._client.list_nodes, parent=loc)
        return read_resources(zone, qrs, nodes)

    def accelerator_types(self, project: str, zone: str) -> list[str]:
        """The accelerator types the zone offers ("v4-8", ...): acceleratorTypes.list."""
        types = self._call(f"listing accelerator types in {zone}", _all,
                           self._client.list_accelerator_types, parent=_loc(project, zone))
        return [t.type_ for t in types]

    def host_keys(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> dict[int, list[str]]:
        """Each worker's SSH host keys ("TYPE BASE64") from the `hostkeys` guest attributes; of
        several slices, by host index across them: slice k's first host is numbered after every
        host of the slices before it, counted from the nodes' own endpoints (as
        multislice.combine numbers them), not from how many workers answered."""
        names = list(nodes) or node_names(name, slices)
        first = {names[0]: 0}
        if len(names) > 1:
            workers = {n.name: len(n.hosts) for n in self.list_nodes(project, zone)}
            first = {n: sum(workers.get(m, 0) for m in names[:k]) for k, n in enumerate(names)}
        found: dict[int, list[str]] = {}
        for node in names:
            answer = self._call(f"reading host keys of {node}", self._client.get_guest_attributes,
                                request={"name": f"{_loc(project, zone)}/nodes/{node}",
                                         "query_path": "hostkeys/"})
            found.update({first[node] + index: [f"{item.key} {item.value}" for item in attrs.query_value.items
                                                if item.namespace == "hostkeys"]
                          for index, attrs in enumerate(answer.guest_attributes)})
        return found

    # ---- delete -----------------------------------------------------------------------------

    def delete_node(self, project: str, zone: str, name: str, timeout: float = 600.0) -> None:
        what = f"deleting node {name}"
        try:
            op = self._call(what, self._client.delete_node,
                            name=f"{_loc(project, zone)}/nodes/{name}")
        except NotFoundError:
            return
        self._wait(op, what, timeout)

    def delete_queued_resource(self, project: str, zone: str, name: str,
                               timeout: float = 600.0) -> None:
        """Delete the queued resource and, with it, its node (force)."""
        what = f"deleting queued resource {name}"
        request = tpu_v2.DeleteQueuedResourceRequest(
            name=f"{_loc(project, zone)}/queuedResources/{name}", force=True)
        try:
            op = self._call(what, self._client.delete_queued_resource, request=request)
        except NotFoundError:
            return
        self._wait(op, what, timeout)

    def delete_slice(self, project: str, zone: str, name: str, timeout: float = 600.0,
                     slices: int = 1, nodes: Sequence[str] = ()) -> None:
        """Delete whatever the slice has: the queued resource (and its node), or the node; of
        several slices, every node (`nodes`: an elastic attempt's own), at once (each delete is
        its own wait)."""
        if not nodes:
            self.delete_queued_resource(project, zone, name, timeout)
        names = list(nodes) or node_names(name, slices)
        if len(names) == 1:
            self.delete_node(project, zone, names[0], timeout)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for done in [pool.submit(self.delete_node, project, zone, n, timeout) for n in names]:
                done.result()  # the first error, once every delete has had its try

    def add_ssh_keys(self, project: str, zone: str, nodes: Sequence[str], lines: Sequence[str],
                     timeout: float = 300.0) -> list[str]:
        """Add `lines` ("USER:ssh-ed25519 AAAA... comment") to each node's `ssh-keys` metadata:
        read, merged, written back with UpdateNode, update_mask `metadata` (UpdateNodeRequest:
        "Supported fields: [description, tags, labels, metadata,
        network_config.enable_external_ips]", cloud.google.com/python/docs/reference/tpu/latest/
        google.cloud.tpu_v2.types.UpdateNodeRequest). The mask replaces the whole map, so the
        node's other keys are sent back as read; two nodes adding at once may lose one line,
        which its node adds again on its next sweep. Returns the nodes changed."""
        from google.protobuf import field_mask_pb2

        changed = []
        for name in nodes:
            full = f"{_loc(project, zone)}/nodes/{name}"
            node = self._call(f"getting node {name}", self._client.get_node, name=full)
            metadata = dict(node.metadata)
            have = [line for line in metadata.get("ssh-keys", "").splitlines() if line.strip()]
            missing = [line for line in lines if line not in have]
            if not missing:
                continue
            metadata["ssh-keys"] = "\n".join([*have, *missing])
            what = f"adding SSH keys to node {name}"
            op = self._call(what, self._client.update_node, node=tpu_v2.Node(name=full, metadata=metadata),
                            update_mask=field_mask_pb2.FieldMask(paths=["metadata"]))
            self._wait(op, what, timeout)
            changed.append(name)
        return changed

    # ---- plumbing ---------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def attempt() -> Any:
            with self._count_lock:
                self.api_calls += 1
            return fn(*args, **kwargs)

        return invoke(self._retry, what, attempt)

    def _get_or_none(self, what: str, fn: Callable[..., Any], name: str) -> Any:
        try:
            return self._call(what, fn, name=name)
        except NotFoundError:
            return None

    def _wait(self, op: Any, what: str, timeout: float) -> None:
        self._wait_for(op.operation.name, what, timeout)

    def _wait_for(self, name: str, what: str, timeout: float, create: bool = False) -> None:
        """Poll the long-running operation until done; its error becomes a typed error."""
        deadline = time.monotonic() + timeout
        delay = min(self.poll_interval, 0.01)
        while not self.operation_done(name, what, create):
            if time.monotonic() > deadline:
                raise CloudError(f"{what}: operation {name} not done after {timeout:g} s")
            time.sleep(delay)
            delay = min(delay * 2, self.poll_interval)


@contextlib.contextmanager
def _parent_must_exist(request: SliceRequest) -> Iterator[None]:
    """On a create, NotFound is about what the request names (project, zone, a disk), not the
    resource being made: a refusal for good, not a missing resource."""
    try:
        yield
    except NotFoundError as err:
        raise CloudRefused(f"{err} (does project {request.project!r} exist, with the TPU API "
                           f"enabled, and is {request.zone!r} a TPU zone?)") from err


def _all(list_fn: Callable[..., Any], parent: str) -> list[Any]:
    """Every item over every page, inside one retried call (pages follow lazily)."""
    return list(list_fn(parent=parent))


def _loc(project: str, zone: str) -> str:
    return f"projects/{project}/locations/{zone}"


def _parent(request: SliceRequest) -> str:
    return _loc(request.project, request.zone)

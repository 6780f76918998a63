"""The emulator's HTTP server: the Cloud TPU v2 and Compute Engine v1 REST subsets, the fault
endpoints, Cloud Storage.

TPU API paths are Google's (`/v2/projects/P/locations/Z/nodes...`, see
google/cloud/tpu_v2/services/tpu/transports/rest_base.py), and the v2alpha1 nodes subset that
gcloud's alpha attach-disk uses (emulator/apis/tpu/node_updates.py). The fault and status endpoints live
under `/emulator/v1/` (control.py). Cloud Storage is gcp-storage-emulator's server on
its own port.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import random
import socket
import threading
from typing import Any, Mapping

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from tpujob.emulator.apis.bodies import read_json
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.fail_next import COMPUTE_METHODS, TPU_METHODS
from tpujob.emulator.apis.routing import collection_rules
from tpujob.emulator.apis.tpu.rules import accelerator_types
from tpujob.emulator.cloud import Cloud
from tpujob.emulator.control import CONTROL_RULES, Control
from tpujob.emulator.machines.reaper import start_time
from tpujob.emulator.world import SPOT_NOTICE_SECONDS, MachinesFactory, World

log = logging.getLogger(__name__)

DEFAULT_PROJECT = "tpujob-local"
_LOC = "/v2/projects/<project>/locations/<zone>"
_LOC_ALPHA = "/v2alpha1/projects/<project>/locations/<zone>"

_ROUTES = Map([
    *collection_rules(f"{_LOC}/nodes", "node", "nodes", create="create", name="rid"),
    Rule(f"{_LOC}/nodes/<rid>:getGuestAttributes", methods=["POST"], endpoint="guest_attributes"),
    Rule(f"{_LOC}/nodes/<rid>", methods=["PATCH"], endpoint="update_node"),
    *collection_rules(f"{_LOC}/queuedResources", "qr", "qrs", create="create", name="rid"),
    Rule(f"{_LOC}/operations/<rid>", methods=["GET"], endpoint="get_operation"),
    Rule(f"{_LOC}/acceleratorTypes", methods=["GET"], endpoint="list_accelerator_types"),
    # v2alpha1: what tpujob reads there (upcomingMaintenance, which google-cloud-tpu's v2 Node
    # lacks) and gcloud's alpha attach-disk (data_disks, node_updates.py).
    Rule(f"{_LOC_ALPHA}/nodes", methods=["GET"], endpoint="list_nodes"),
    Rule(f"{_LOC_ALPHA}/nodes/<rid>", methods=["GET"], endpoint="get_node"),
    Rule(f"{_LOC_ALPHA}/nodes/<rid>", methods=["PATCH"], endpoint="update_node"),
    Rule(f"{_LOC_ALPHA}/operations/<rid>", methods=["GET"], endpoint="get_operation"),
    *CONTROL_RULES,
], strict_slashes=False)


_CONTROL_ENDPOINTS = frozenset(rule.endpoint for rule in CONTROL_RULES)


class TpuApp:
    """The WSGI application over one emulated cloud (its /emulator/v1/ endpoints: control.py)."""

    def __init__(self, cloud: Cloud, info: dict[str, Any]):
        self.cloud = cloud
        self.tpu = cloud.tpu
        self.control = Control(cloud, info)

    def __call__(self, environ, start_response):
        request = Request(environ)
        try:
            if request.path.startswith("/compute/v1/"):
                from tpujob.emulator.apis.compute import routes

                endpoint, args = routes.ROUTES.bind_to_environ(environ).match()
                self._inject_fault()
                body = self._replay(COMPUTE_METHODS, endpoint, request, args)
                if body is None:
                    cloud = self.cloud
                    body = routes.handle(cloud.compute, cloud.vms, cloud.migs, request, endpoint, args)
                return _json(200, body)(environ, start_response)
            if request.path.startswith("/v1/users/"):  # the OS Login API (oslogin.py)
                from tpujob.emulator.apis import oslogin

                endpoint, args = oslogin.ROUTES.bind_to_environ(environ).match()
                self._inject_fault()
                body = oslogin.handle(self.cloud.oslogin, request, endpoint, args,
                                      self.control.info.get("project", DEFAULT_PROJECT))
                return _json(200, body)(environ, start_response)
            endpoint, args = _ROUTES.bind_to_environ(environ).match()
            body = None
            if request.path.startswith(("/v2/", "/v2alpha1/")):
                self._inject_fault()
                body = self._replay(TPU_METHODS, endpoint, request, args)
            if body is None and endpoint in _CONTROL_ENDPOINTS:
                body = self.control.handle(request, endpoint)
            elif body is None:
                body = getattr(self, "_" + endpoint)(request, **args)
            if request.path.startswith("/v2alpha1/"):
                body = _typed_as(body, "v2alpha1")
            response = _json(200, body)
        except ApiError as err:
            response = _json(err.code, err.body())
        except HTTPException as err:
            response = _json(err.code or 500, ApiError(err.code or 500, err.description or "",
                                                       status=err.name.upper()).body())
        return response(environ, start_response)

    def _inject_fault(self) -> None:
        """`faults --api-error-rate`: a matched TPU or Compute API call fails with 429/503 before
        it does anything (as Google's front end would), so a retry is always safe. Never the
        /emulator/v1/ switches, which must keep answering to turn the faults off again."""
        injected = self.cloud.world.inject_api_error()
        if injected:
            raise injected

    def _replay(self, methods: dict, endpoint: str, request: Request, args: Mapping[str, Any]) -> dict | None:
        """`fail-next`: a fault pending for this call's method is raised as Google's error body,
        or (in operation) the call answers an operation that changed nothing and ends with the
        error; None when no fault is pending. Before the call does anything, as Google's front
        end refuses."""
        method = methods.get(endpoint)
        fault = self.cloud.fail_next.take(method[0]) if method else None
        if fault is None:
            return None
        on_compute = methods is COMPUTE_METHODS
        if not fault.in_operation:
            raise ApiError(fault.status, fault.message, fault.grpc_status,
                           payload=fault.compute_body() if on_compute else fault.tpu_body())
        if on_compute:
            from tpujob.emulator.apis.compute.operations import API_ROOT

            kind = "delete" if request.method == "DELETE" else "insert"
            target = API_ROOT + request.path.removeprefix("/compute/v1")
            return self.cloud.compute.failed_operation(args["project"], args.get("zone"), kind,
                                            target, fault.compute_operation_error())
        if endpoint == "create_qr":
            # Google ends a queued resource's create operation once the request is queued; what
            # goes wrong later shows as state FAILED with failedData.error (tpu.v2 discovery,
            # QueuedResourceState): the queued resource is accepted, then ends FAILED with it.
            return self._create_qr(request, failure=fault.rpc_status(), **args)
        parent = _parent(args["project"], args["zone"])
        collection = "queuedResources" if endpoint.endswith("_qr") else "nodes"
        rid = args.get("rid") or request.args.get("nodeId") or request.args.get("queuedResourceId", "")
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "update"}[request.method]
        return self.tpu.fail_operation(parent, verb, f"{parent}/{collection}/{rid}", fault.rpc_status())

    # ---- TPU API ----------------------------------------------------------------------------

    def _create_node(self, request: Request, project: str, zone: str) -> dict:
        node_id = request.args.get("nodeId", "")
        return self.tpu.create_node(_parent(project, zone), node_id, _node_body(request))

    def _list_nodes(self, request: Request, project: str, zone: str) -> dict:
        return {"nodes": self.tpu.list_nodes(_parent(project, zone))}

    def _get_node(self, request: Request, project: str, zone: str, rid: str) -> dict:
        return self.tpu.get_node(f"{_parent(project, zone)}/nodes/{rid}")

    def _delete_node(self, request: Request, project: str, zone: str, rid: str) -> dict:
        return self.tpu.delete_node(f"{_parent(project, zone)}/nodes/{rid}")

    def _update_node(self, request: Request, project: str, zone: str, rid: str) -> dict:
        return self.tpu.update_node(f"{_parent(project, zone)}/nodes/{rid}",
                                         request.args.get("updateMask", ""), _node_body(request),
                                         api_version=request.path.split("/")[1])

    def _guest_attributes(self, request: Request, project: str, zone: str, rid: str) -> dict:
        body = read_json(request)
        return self.tpu.guest_attributes(f"{_parent(project, zone)}/nodes/{rid}",
                                              body.get("queryPath", ""), body.get("workerIds", []))

    def _create_qr(self, request: Request, project: str, zone: str, failure: dict | None = None) -> dict:
        from google.cloud import tpu_v2  # parses integer or named enums alike

        qr_id = request.args.get("queuedResourceId", "")
        body = _normalise(tpu_v2.QueuedResource, read_json(request))
        return self.tpu.create_queued_resource(_parent(project, zone), qr_id, body, failure=failure)

    def _list_qrs(self, request: Request, project: str, zone: str) -> dict:
        return {"queuedResources": self.tpu.list_queued_resources(_parent(project, zone))}

    def _get_qr(self, request: Request, project: str, zone: str, rid: str) -> dict:
        return self.tpu.get_queued_resource(f"{_parent(project, zone)}/queuedResources/{rid}")

    def _delete_qr(self, request: Request, project: str, zone: str, rid: str) -> dict:
        force = request.args.get("force", "false").lower() in ("true", "1")
        return self.tpu.delete_queued_resource(
            f"{_parent(project, zone)}/queuedResources/{rid}", force=force)

    def _get_operation(self, request: Request, project: str, zone: str, rid: str) -> dict:
        return self.tpu.get_operation(f"{_parent(project, zone)}/operations/{rid}")

    def _list_accelerator_types(self, request: Request, project: str, zone: str) -> dict:
        return {"acceleratorTypes": accelerator_types(_parent(project, zone))}



class EmulatorServer:
    """The emulator in this process: TPU API + faults on one port, Cloud Storage on another.

    Used by `python -m tpujob.emulator` (the background process) and by tests in-process.
    """

    def __init__(self, state_dir: pathlib.Path, host: str = "127.0.0.1", port: int = 0,
                 project: str = DEFAULT_PROJECT, provisioning_delay: float = 0.2,
                 ssh_port: int = 0, machines_factory: MachinesFactory | None = None,
                 storage: bool = True, preempt_grace: float = SPOT_NOTICE_SECONDS):
        self.state_dir = pathlib.Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.world = World(self.state_dir, provisioning_delay=provisioning_delay,
                           ssh_port=ssh_port or ssh_port_for(host),
                           machines_factory=machines_factory, preempt_grace=preempt_grace)
        self._storage = None
        storage_url = None
        if storage:
            from gcp_storage_emulator.server import create_server

            _compact_storage_meta()
            storage_port = free_port(host)
            self._storage = create_server(host, storage_port, in_memory=False,
                                          data_dir=str(self.state_dir / "storage"))
            storage_url = f"http://{host}:{storage_port}"
        self.emulator = Cloud.build(self.world, self.state_dir, storage_url)
        # What /emulator/v1/status answers: filled in once the HTTP server has its port.
        self.info: dict[str, Any] = {}
        self._http = make_server(host, port, TpuApp(self.emulator, self.info), threaded=True)
        url = f"http://{host}:{self._http.server_port}"
        from tpujob.emulator.apis.oslogin import ACCOUNT

        self.info.update({"tpu_endpoint": url, "compute_endpoint": url, "storage_endpoint": storage_url,
                          "oslogin_endpoint": url, "account": ACCOUNT, "project": project,
                          "ssh_port": self.world.ssh_port, "pid": os.getpid(),
                          # Which process `pid` is: pids are reused (32768 of them by default on
                          # Linux), and `tpujob emulator stop` signals this one only.
                          "started": start_time(os.getpid())})
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.info["tpu_endpoint"]

    def start(self) -> dict:
        if self._storage:
            self._storage.start()
        # A short poll interval: shutdown() waits for the serving loop to notice.
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self.info

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._storage:
            self._storage.stop()
        self.emulator.close()

    def __enter__(self) -> EmulatorServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _CompactJson:
    """`json` for gcp_storage_emulator.storage, whose dumps leaves out `indent`."""

    loads = staticmethod(json.loads)

    @staticmethod
    def dumps(obj: Any, **kwargs: Any) -> str:
        kwargs.pop("indent", None)
        return json.dumps(obj, **kwargs)


def _compact_storage_meta() -> None:
    """gcp-storage-emulator rewrites its whole metadata file after every change to any object,
    with indent=2, which puts json on its pure-Python encoder: with a run dir's heartbeat
    replaced each second that was a third of this emulator's CPU (py-spy, 2026-11-27). The same
    file, compact (json's C encoder), is read back the same. Only that module's `json` changes;
    a version that no longer names it (no `json` global) is left as it is."""
    from gcp_storage_emulator import storage

    if getattr(storage, "json", None) is json:
        storage.json = _CompactJson


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# Where the hosts' SSH port is drawn from: below the kernel's ephemeral range (Linux's default
# net.ipv4.ip_local_port_range starts at 32768) and above the ports services usually take.
SSH_PORTS_FROM = 20000


def ephemeral_ports_from() -> int:
    """The first port the kernel hands out for bind(port 0) and connect() on this machine."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def ssh_port_for(host: str = "127.0.0.1") -> int:
    """The port every emulated host's SSH server listens on, each on its own address: free now,
    and outside the ephemeral range. Nothing holds it while no node is up, and a port in that
    range can then go to any process's bind(port 0) or connect(): one bound on every address
    (JAX's coordinator binds [::]:PORT unless told otherwise, as the test programs of
    tests/emulator/test_image_site.py do: seen listening on kernel-picked ports through a suite
    run, 2026-11-28) refuses the port on every host address, so trying other addresses does not
    help. Only an explicit bind can take a port below the range. Falls back to a free ephemeral
    port when no port there is free."""
    last = ephemeral_ports_from()
    for _ in range(64 if last > SSH_PORTS_FROM + 1 else 0):
        port = random.randrange(SSH_PORTS_FROM, last)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port
    return free_port(host)


def _parent(project: str, zone: str) -> str:
    return f"projects/{project}/locations/{zone}"


def _json(code: int, body: Any) -> Response:
    return Response(json.dumps(body), status=code, mimetype="application/json")


def _normalise(message_type: Any, body: dict) -> dict:
    """The body as the API would store it: enum names, known fields only, camelCase."""
    try:
        message = message_type.from_json(json.dumps(body), ignore_unknown_fields=True)
    except Exception as err:  # protobuf's json_format raises ParseError with the field's name
        raise ApiError(400, f"invalid {message_type.__name__}: {err}") from err
    return json.loads(message_type.to_json(message, use_integers_for_enums=False,
                                           always_print_fields_with_no_presence=False))


def _node_body(request: Request) -> dict:
    from google.cloud import tpu_v2

    return _normalise(tpu_v2.Node, read_json(request))


def _typed_as(body: Any, version: str) -> Any:
    """An answer as the API `version` types it: operations carry `@type`
    `type.googleapis.com/google.cloud.tpu.VERSION.Node` (and OperationMetadata), which the
    version's client unpacks; the JSON of Node is the same in v2 and v2alpha1 for what the
    emulator serves."""
    if isinstance(body, dict):
        return {k: (v.replace("google.cloud.tpu.v2.", f"google.cloud.tpu.{version}.")
                    if k == "@type" and isinstance(v, str) else _typed_as(v, version))
                for k, v in body.items()}
    if isinstance(body, list):
        return [_typed_as(v, version) for v in body]
    return body

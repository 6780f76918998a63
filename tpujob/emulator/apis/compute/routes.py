"""Compute Engine's routes: which object serves each path of the v1 subset, and how a matched
request's arguments reach it. Disks, snapshots, operations, projects and regions: the
ComputeEmulator (api.py); instances: TpuVms (tpu_vms.py); workload policies, instance templates
and MIGs: TpuMigs (tpu_migs.py).

Paths are Google's (`/compute/v1/projects/P/zones/Z/disks...`, see
google/cloud/compute_v1/services/disks/transports/rest_base.py).
"""

from __future__ import annotations

from typing import Any, Mapping

from werkzeug.routing import Map, Rule

from tpujob.emulator.apis.bodies import read_json
from tpujob.emulator.apis.compute.api import ComputeEmulator
from tpujob.emulator.apis.compute.instances import instance_filter
from tpujob.emulator.apis.compute.tpu_migs import TpuMigs
from tpujob.emulator.apis.compute.tpu_vms import TpuVms
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.routing import collection_rules


# compute.v1.json paths: resourcePolicies (regional) and instanceTemplates (global), lists
# included; instanceGroupManagers (resize included) and instanceGroupManagerResizeRequests.insert
# (zonal).
def mig_rules(base: str) -> list[Rule]:
    pol, tpl = f"{base}/regions/<region>/resourcePolicies", f"{base}/global/instanceTemplates"
    mig = f"{base}/zones/<zone>/instanceGroupManagers"
    return [*collection_rules(pol, "policy", "policies"),
            *collection_rules(tpl, "template", "templates"),
            *collection_rules(mig, "mig", "migs"),
            Rule(f"{mig}/<name>/listManagedInstances", methods=["POST"], endpoint="list_managed"),
            Rule(f"{mig}/<name>/listErrors", methods=["GET"], endpoint="list_errors"),
            Rule(f"{mig}/<name>/resize", methods=["POST"], endpoint="resize_mig"),
            Rule(f"{mig}/<name>/resizeRequests", methods=["POST"],
                 endpoint="refuse_resize_request"),
            Rule(f"{base}/regions/<region>/operations/<name>", methods=["GET"],
                 endpoint="region_operation"),
            Rule(f"{base}/regions/<region>/operations/<name>/wait", methods=["POST"],
                 endpoint="region_operation_wait")]


MIG_ENDPOINTS = frozenset(r.endpoint for r in mig_rules(""))


def _migs(migs: TpuMigs, request: Any, endpoint: str, args: Mapping[str, Any]) -> dict:
    project = args["project"]
    if endpoint.startswith("region_operation"):
        wait = endpoint.endswith("_wait")
        ops = migs.ops
        return (ops.wait if wait else ops.get)(project, args["region"], args["name"])
    scope = [args[k] for k in ("region", "zone") if k in args]
    if endpoint == "resize_mig":
        try:
            size = int(request.args.get("size", ""))
        except ValueError:
            raise ApiError(400, "Required parameter 'size' is missing or not an integer") from None
        return migs.resize_mig(project, args["zone"], args["name"], size)
    if endpoint.startswith("insert_"):
        return getattr(migs, endpoint)(project, *scope, read_json(request))
    return getattr(migs, endpoint)(project, *scope, *([args["name"]] if "name" in args else []))


_BASE = "/compute/v1/projects/<project>"
ROUTES = Map([
    *collection_rules(f"{_BASE}/zones/<zone>/disks", "disk", "disks"),
    *collection_rules(f"{_BASE}/global/snapshots", "snapshot", "snapshots"),
    # zoneOperations.list: what a VM's preemption leaves (tpu_vms.TpuVms.preempt).
    Rule(f"{_BASE}/zones/<zone>/operations", methods=["GET"], endpoint="list_zone_operations"),
    Rule(f"{_BASE}/zones/<zone>/operations/<name>", methods=["GET"], endpoint="zone_operation"),
    Rule(f"{_BASE}/zones/<zone>/operations/<name>/wait", methods=["POST"],
         endpoint="zone_operation_wait"),
    Rule(f"{_BASE}/global/operations/<name>", methods=["GET"], endpoint="global_operation"),
    Rule(f"{_BASE}/global/operations/<name>/wait", methods=["POST"],
         endpoint="global_operation_wait"),
    Rule(_BASE, methods=["GET"], endpoint="get_project"),
    Rule(f"{_BASE}/regions/<region>", methods=["GET"], endpoint="get_region"),  # its quotas (quotas.py)
    # TPU VMs (tpu_vms.py): compute.v1.json instances.insert/list/get/delete/getGuestAttributes/stop.
    *collection_rules(f"{_BASE}/zones/<zone>/instances", "instance", "instances"),
    Rule(f"{_BASE}/zones/<zone>/instances/<name>/getGuestAttributes", methods=["GET"],
         endpoint="instance_guest_attributes"),
    Rule(f"{_BASE}/zones/<zone>/instances/<name>/stop", methods=["POST"], endpoint="stop_instance"),
    # instances.setMetadata: POST .../instances/{instance}/setMetadata, the body a Metadata
    # {kind, fingerprint, items} (cloud.google.com/compute/docs/reference/rest/v1/instances/setMetadata).
    Rule(f"{_BASE}/zones/<zone>/instances/<name>/setMetadata", methods=["POST"],
         endpoint="set_metadata_instance"),
    *mig_rules(_BASE),  # multi-host slices: workload policies, templates, MIGs
], strict_slashes=False)


def handle(compute: ComputeEmulator, vms: TpuVms, migs: TpuMigs, request: Any, endpoint: str,
           args: Mapping[str, Any]) -> dict:
    """Serve one matched request (the server routes /compute/v1/ here)."""
    project = args["project"]
    if endpoint in MIG_ENDPOINTS:
        return _migs(migs, request, endpoint, args)
    if "instance" in endpoint:  # tpu_vms.py serves every instances method
        return _instances(vms, request, endpoint, args)
    if endpoint == "insert_disk":
        return compute.insert_disk(project, args["zone"], _with_query_source(request))
    if endpoint == "insert_snapshot":
        return compute.insert_snapshot(project, read_json(request))
    if endpoint == "list_zone_operations":
        match = instance_filter(request.args.get("filter", ""), fields=("operationType", "targetLink"))
        return {"kind": "compute#operationList",
                "items": [op for op in compute.operations.list(project, args["zone"]) if match(op)]}
    if endpoint in ("zone_operation_wait", "global_operation_wait"):
        return compute.operations.wait(project, args.get("zone"), args["name"])
    if endpoint.startswith(("zone_operation", "global_operation")):
        return compute.operation(project, args.get("zone"), args["name"])
    method = getattr(compute, endpoint)
    return method(project, *(args[k] for k in ("zone", "region", "name") if k in args))


def _instances(vms: TpuVms, request: Any, endpoint: str, args: Mapping[str, Any]) -> dict:
    project, zone, name = args["project"], args["zone"], args.get("name", "")
    if endpoint == "insert_instance":
        if request.args.get("sourceInstanceTemplate") or request.args.get("sourceMachineImage"):
            raise ApiError(400, "emulator limit: insert from a template or machine image is not "
                                "emulated; give the instance's fields")
        return vms.insert(project, zone, read_json(request))
    if endpoint == "list_instances":
        return vms.list(project, zone, request.args.get("filter", ""))
    if endpoint == "instance_guest_attributes":
        return vms.guest_attributes(project, zone, name, request.args.get("queryPath", ""))
    if endpoint == "set_metadata_instance":
        return vms.set_metadata(project, zone, name, read_json(request))
    return getattr(vms, endpoint.split("_")[0])(project, zone, name)


def _with_query_source(request: Any) -> dict:
    body = read_json(request)
    if request.args.get("sourceImage"):
        raise ApiError(400, "images are not emulated: create from a snapshot or a disk")
    return body

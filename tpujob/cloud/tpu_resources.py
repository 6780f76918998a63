"""A Cloud TPU API node and queued resource as tpujob reads them: a Slice (phase, hosts, health,
the maintenance window), a TpuResource for gc, a FAILED queued resource's error, typed.

What google-cloud-tpu's v2 objects do not carry is read from the very JSON Google answered
(RawNodes). No request of its own: tpujob.cloud.tpu_api makes the calls and hands the answers here.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any, Iterator

from google.cloud import tpu_v2

from tpujob.cloud.api_calls import classify, status_error
from tpujob.cloud.base import Host, MaintenanceWindow, Slice, TpuResource, slice_phase


class RawNodes:
    """Each node's `upcomingMaintenance` from the JSON Google answered, by node name.

    google-cloud-tpu 1.28's v2 `Node` has no such field and its REST transport drops the fields
    it does not know (tpu_v2/services/tpu/transports/rest.py; tpu.v2.json has it since 2026-10); v2alpha1's
    `Node` has it but that client has no REST transport. So the answer to the very list (or get)
    the client made is read as the transport's session received it: a `requests` response hook,
    on this thread only, while `keeping()` is open. No request of its own."""

    def __init__(self, client: Any):
        self._local = threading.local()
        session = getattr(client._transport, "_session", None)  # the REST transport's AuthorizedSession
        if session is not None:
            session.hooks.setdefault("response", []).append(self._seen)

    @contextlib.contextmanager
    def keeping(self) -> Iterator[dict[str, dict[str, Any]]]:
        kept: dict[str, dict[str, Any]] = {}
        self._local.kept = kept
        try:
            yield kept
        finally:
            self._local.kept = None

    def _seen(self, response: Any, *args: Any, **kwargs: Any) -> None:
        kept = getattr(self._local, "kept", None)
        if kept is None or not response.ok or "/nodes" not in response.url:
            return
        try:
            body = response.json()
        except ValueError:
            return
        for node in body.get("nodes", [body]) if isinstance(body, dict) else ():
            if isinstance(node, dict) and isinstance(node.get("upcomingMaintenance"), dict):
                kept[node.get("name", "")] = node["upcomingMaintenance"]


def _window(raw: dict[str, Any] | None) -> MaintenanceWindow | None:
    if not raw:
        return None
    start = raw.get("windowStartTime")
    try:
        at = datetime.datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() if start else None
    except ValueError:
        at = None
    return MaintenanceWindow(type=raw.get("type", "UNKNOWN_TYPE"),
                             status=raw.get("maintenanceStatus", "UNKNOWN"), start=at)


def short(name: str) -> str:
    """A resource's own name, from its full path (projects/P/locations/Z/nodes/NAME)."""
    return name.rsplit("/", 1)[-1]


def epoch(stamp: Any) -> float | None:
    return stamp.timestamp() if stamp else None


def read_slice(name: str, zone: str, node: Any, qr: Any, raw: dict[str, dict[str, Any]] | None = None) -> Slice:
    """The slice a node and its queued resource make (either may be None); `raw`: the
    upcomingMaintenance RawNodes kept, by node name."""
    node_state = node.state.name if node is not None else None
    qr_state = qr.state.state.name if qr is not None else None
    hosts = tuple(Host(i, e.ip_address, e.access_config.external_ip or None)
                  for i, e in enumerate(node.network_endpoints)) if node is not None else ()
    detail = ""
    if node is not None and node.health_description:
        detail = node.health_description
    if qr is not None and qr.state.failed_data.error.message:
        detail = qr.state.failed_data.error.message
    failure = queued_resource_failure(name, qr) if qr_state == "FAILED" else None
    accelerator = node.accelerator_type if node is not None else (
        qr.tpu.node_spec[0].node.accelerator_type if qr is not None and qr.tpu.node_spec else None)
    # The node's own createTime: when capacity was found and its hosts started coming up (a
    # queued resource creates its node only then), so provisioning is timed apart from queueing.
    created = node.create_time if node is not None else None
    return Slice(name=name, zone=zone, phase=slice_phase(node_state, qr_state),
                 node_state=node_state, queued_resource_state=qr_state,
                 accelerator_type=accelerator, hosts=hosts,
                 labels=dict(node.labels) if node is not None else {}, detail=detail,
                 node_create_time=created.timestamp() if created else None, failure=failure,
                 metadata=dict(node.metadata) if node is not None else {},
                 **(_health(node, raw or {}) if node is not None else {}))


def read_resources(zone: str, qrs: list[Any], nodes: list[Any]) -> list[TpuResource]:
    """The zone's queued resources and nodes, labels and createTime included (gc's view). A
    queued resource has no labels of its own in tpu.v2 (QueuedResource has no `labels` field):
    its node spec's node carries them, and so its node once made."""
    found, spot_queues = [], set()
    for q in qrs:
        node = q.tpu.node_spec[0].node if q.tpu.node_spec else None
        spot = tpu_v2.QueuedResource.pb(q).HasField("spot")
        if spot:
            spot_queues.add(q.name)
        found.append(TpuResource(
            "queued-resource", short(q.name), zone, q.state.state.name,
            labels=dict(node.labels) if node is not None else {}, created=epoch(q.create_time),
            accelerator_type=node.accelerator_type if node is not None else None, spot=spot))
    for n in nodes:
        found.append(TpuResource(
            "node", short(n.name), zone, n.state.name, labels=dict(n.labels),
            created=epoch(n.create_time), accelerator_type=n.accelerator_type,
            hosts=tuple(Host(i, e.ip_address, e.access_config.external_ip or None)
                        for i, e in enumerate(n.network_endpoints)),
            data_disks=tuple(short(d.source_disk) for d in n.data_disks),
            spot=bool(n.scheduling_config.spot or n.scheduling_config.preemptible
                      or n.queued_resource in spot_queues), metadata=dict(n.metadata)))
    return found


def queued_resource_failure(name: str, qr: Any) -> Exception:
    """Why a queued resource ended FAILED, typed like a create error: its failedData.error
    (google.rpc.Status) through the classifier. FAILED is "a late-found problem with the
    request, or no capacity within its constraints" (tpu.v2 discovery, QueuedResourceState);
    without an error the second: a capacity miss."""
    from tpujob.errors import StockoutError

    state = qr.state
    what = f"queued resource {name} FAILED (stateInitiator {state.state_initiator.name})"
    if state.failed_data.error.code or state.failed_data.error.message:
        return classify(what, status_error(state.failed_data.error), create_operation=True)
    return StockoutError(f"{what} without failedData.error: no capacity within its constraints "
                         "(e.g. its valid-until passed)")


def _health(node: Any, raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    health = node.health.name if node.health else None
    symptoms = tuple(f"{s.symptom_type.name} (worker {s.worker_id or '?'}): {s.details}".rstrip(": ")
                     for s in node.symptoms)
    return {"health": None if health == "HEALTH_UNSPECIFIED" else health, "symptoms": symptoms,
            "maintenance": _window(raw.get(node.name))}

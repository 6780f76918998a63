"""Queued resources of the emulated TPU API: create, read, delete, and their life cycle.

A queued resource asks for one node (`nodeSpec[0].nodeId`) or several alike (multislice:
`nodeSpec[0].multisliceParams`); the service serves it when its zone has capacity, within its
validity, and suspends it when a node of it is preempted. A mixin of
tpujob.emulator.apis.tpu.nodes.Emulator: it uses the emulator's lock, nodes and operations.

One nodeSpec only: tpujob sends one, and several specs (mixed types or zones in one request)
are refused as not emulated rather than accepted on a guess.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tpujob.emulator.apis.bodies import check_id
from tpujob.emulator.apis.errors import ApiError


@dataclass
class QueuedResource:
    parent: str
    qr_id: str
    body: dict
    created: float
    deleting: bool = False
    gone: bool = False
    failure: dict | None = None  # fail-next --in-operation: end FAILED with this failedData.error

    @property
    def name(self) -> str:
        return f"{self.parent}/queuedResources/{self.qr_id}"

    @property
    def zone(self) -> str:
        return self.parent.rsplit("/", 1)[1]

    def set_state(self, state: str, initiator: str | None = None) -> None:
        self.body["state"] = {"state": state}
        if initiator:
            self.body["state"]["stateInitiator"] = initiator


def node_names_of(qr: QueuedResource) -> list[str]:
    """The full names of the nodes the queued resource asks for: its nodeId, or, multislice,
    `PREFIX-0` .. `PREFIX-(nodeCount-1)` with the queued resource's id as the prefix where none
    is given (tpu.v2 discovery, MultisliceParams.nodeIdPrefix)."""
    spec = qr.body["tpu"]["nodeSpec"][0]
    parent = spec.get("parent") or qr.parent
    multi = spec.get("multisliceParams")
    if multi is None:
        return [f"{parent}/nodes/{spec['nodeId']}"]
    prefix = multi.get("nodeIdPrefix") or qr.qr_id
    return [f"{parent}/nodes/{prefix}-{k}" for k in range(int(multi["nodeCount"]))]


def check_node_spec(spec: dict, qr_id: str) -> None:
    """nodeId or multisliceParams, one of them (tpu.v2 discovery, NodeSpec: nodeId "is only
    specified when requesting a single node. In case of multislice requests, multislice_params
    must be populated instead"); nodeCount "Required ... This needs to be > 1"
    (MultisliceParams). Google's wordings for these refusals are not published: these are ours,
    400 INVALID_ARGUMENT as for any malformed field. Multislice on v2/v3 is refused with the
    answer quoted in AI-Hypercomputer/maxtext#158 ("We do not support Multislice on v2. Only v4+
    is supported"): a bare INVALID_ARGUMENT with an EID."""
    multi = spec.get("multisliceParams")
    if (multi is None) == (not spec.get("nodeId")):
        raise ApiError(400, "tpu.nodeSpec[0]: exactly one of nodeId and multisliceParams must be set")
    if multi is None:
        check_id(spec["nodeId"], "nodeId")
        return
    count = multi.get("nodeCount")
    if not isinstance(count, int) or count < 2:
        raise ApiError(400, f"tpu.nodeSpec[0].multisliceParams.nodeCount must be > 1, got {count!r}")
    prefix = multi.get("nodeIdPrefix") or qr_id
    check_id(f"{prefix}-{count - 1}", "nodeId")
    if spec["node"].get("acceleratorType", "").split("-")[0] in ("v2", "v3"):
        raise ApiError(400, "Cloud TPU was unable to complete the operation. Please try again, or "
                            f"contact support if the problem persists. [EID: 0x{random.getrandbits(64):016x}]")

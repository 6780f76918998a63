"""What the emulator's TPU MIGs answer with, and where: Google's wordings for what it refuses
(MIG_WORDINGS, each with its source), the choices no source settles (UNSOURCED, in one place to
correct), a MIG VM's view of its slice's hosts, and the MIG status fields (tpu_migs.TpuMigs does
the work; routes.py routes to it)."""

from __future__ import annotations

import random
import string
from typing import Any

MIG_WORDINGS = {
    # memory-layers TPU runbook (user report): a bare policy name.
    "malformed": "The URL is malformed.",
    # memory-layers TPU runbook; third-party TPU7x guide (user reports).
    "bulk": "MIGs with TPU accelerator topology require BULK mode in target size policy",
    # vllm-project/ci-infra PR #547 (user report).
    "placement": ("Creation of a managed instance group with tpu7x-standard-4t machine type with "
                  "placement policy is not supported. Use workload policy instead."),
    # "Bulk mode in MIGs is only supported with instance templates that specify either a
    # reservation-bound or flex-start provisioning model" (cloud.google.com/compute/docs/
    # instance-groups/bulk-create-instances-in-mig): the documentation's sentence; the words of
    # Google's refusal are quoted nowhere found.
    "bulk_models": ("Bulk mode in MIGs is only supported with instance templates that specify either a "
                    "reservation-bound or flex-start provisioning model"),
    # A global template's subnetwork named bare: NetworkInterface.subnetwork takes "a full or
    # partial URL", e.g. regions/REGION/subnetworks/NAME (google-cloud-compute), and a global
    # template has no region to find a bare name in (ansible/ansible#28930: "Could not determine
    # region for subnetwork", a peer). Google's refusal is quoted nowhere found: these words
    # follow Compute's "Invalid value for field" refusals, the emulator's.
    "subnetwork": ("Invalid value for field 'resource.properties.networkInterfaces[0].subnetwork': '{given}'. "
                   "The URL is malformed (the emulator's words: a full or partial URL, "
                   "regions/REGION/subnetworks/NAME, is wanted)"),
    # memory-layers TPU runbook (user report).
    "resize_request": "Creating resize requests for managed instance group with TPU is not allowed",
    # AI-Hypercomputer/xpk#751 quotes only the end ("... in the gang mode of size '8'. Should be
    # equal to the gang size."); the beginning here is the emulator's.
    "gang": ("Target size {size} of the managed instance group is not valid in the gang mode of "
             "size '{hosts}'. Should be equal to the gang size."),
}
# The provisioning models bulk mode takes (MIG_WORDINGS["bulk_models"]).
BULK_MODELS = frozenset({"RESERVATION_BOUND", "FLEX_START"})
UNSOURCED: dict[str, Any] = {
    # Whether the refusals above come synchronously (400) or in the operation: unknown; 400 here.
    "refusal_status": 400,
    # A TPU MIG whose VM was preempted (or killed): Google's documents do not say (facts:
    # "Unknown: how Spot or STANDARD multi-host MIGs behave (also after preemption)"). Here the
    # VM reads TERMINATED, is not recreated, and the topology reads INCOMPLETE ("insufficient
    # number of running VMs", compute.v1.json); its host alone dies, without a SIGTERM grace.
    "topology_after_loss": "INCOMPLETE",
    # Bulk mode lets a MIG's target size grow only from 0 (cloud.google.com/compute/docs/
    # instance-groups/about-bulk-mode: facts, "grow only from targetSize 0"); Google's words for
    # refusing a resize that grows a BULK MIG from another size are quoted nowhere found.
    "grow_from_zero": ("A managed instance group in bulk mode can grow only from target size 0 "
                       "(the emulator's words: Google's are quoted nowhere found)"),
    # While a flex-start BULK MIG waits for capacity, its members read PENDING, as a lone
    # flex-start VM does ("waiting for available capacity from Dynamic Workload Scheduler",
    # compute.v1.json Instance.status), and a stockout records no error (tpu_vms.
    # FLEX_START_WAITS_OUT_STOCKOUTS). No source says whether a BULK MIG lists its VMs before it
    # can make them all ("the MIG stays at zero instances until it is able to obtain the full
    # capacity", overview-add-vms-all-at-once-in-mig); here they are listed, PENDING.
    "flex_start_members": "PENDING",
    # A MIG whose template names a data disk the zone lacks (or one held read-write elsewhere):
    # no source says how Google answers. Here each try to make the VMs fails with the words
    # instances.insert would give (vm_disks.py) in listErrors and lastAttempt, retried as a
    # stockout is (CREATING "retries until success").
    "disk_refusal": "retried",
    # Where Google shows a BULK MIG's failed try (a stockout): its status.bulkInstanceOperation.
    # lastProgressCheck.error ("Errors encountered during bulk instance operation",
    # google-cloud-compute) and listErrors; no source shows a member's lastAttempt for it, and
    # bulk mode makes no VM until it can make them all (about-bulk-mode): none here.
    "bulk_errors": "lastProgressCheck",
    # How long after every VM runs (and the MIG is stable) the topology turns from ACTIVATING to
    # ACTIVE: no source says; the provisioning delay times this factor here.
    "topology_activation": 1.0,
    # Which VM of a TPU MIG is TPU worker 0: Google's documents do not say how it is chosen; a
    # VM's `tpu-env` metadata says which it is (tpu_env). Here the reverse of the names' order.
    "worker_order": "reverse-name",
}


class MemberMachines:
    """One MIG VM's view of its slice's machines: its own host only (any index means it)."""

    def __init__(self, slice_machines, index: int):
        self._slice, self._index = slice_machines, index

    def host_root(self, index: int):
        return self._slice.host_root(self._index)

    def ssh_connections(self, index: int) -> dict:
        return self._slice.ssh_connections(self._index)

    def kill_host(self, index: int = 0) -> None:
        self._slice.kill_host(self._index)

    def authorize(self, authorized_keys: list[str]) -> None:
        self._slice.authorize(authorized_keys, self._index)

    def preempt(self, grace_seconds: float) -> None:
        self._slice.kill_host(self._index)  # UNSOURCED["topology_after_loss"]

    def stop(self) -> None:
        self._slice.kill_host(self._index)

    def freeze(self, index: int, thaw: bool = False) -> int:
        return self._slice.freeze(self._index, thaw)


def ref_of(url: str, project: str = "") -> str:
    """`projects/P/...` of a full or partial URL (`regions/R/...` takes `project`)."""
    tail = url.split("/compute/v1/")[-1]
    return tail if tail.startswith("projects/") else f"projects/{project}/{tail}"


def suffix() -> str:
    # baseInstanceName + "-" + 4 random characters (compute.v1.json InstanceGroupManager).
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=4))


def members(base: str, size: int) -> list[str]:
    """A MIG's VM names (BASE-xxxx), in TPU worker order: worker 0 first. Which VM is worker 0
    is Google's to say, in each VM's `tpu-env` metadata (tpu_env); here the reverse of the
    names' order (UNSOURCED["worker_order"]), so a client that orders hosts by name is caught."""
    return sorted((f"{base}-{suffix()}" for _ in range(size)), reverse=UNSOURCED["worker_order"] == "reverse-name")


def tpu_env(worker: int, accelerator: str, topology: str | None) -> str:
    """The `tpu-env` metadata value a TPU VM reads its worker id from: YAML lines such as
    "WORKER_ID: '0'" (torch_xla's get_tpu_env reads instance/attributes/tpu-env; a real one is
    quoted in penghao-wu/cambrian test_tpu.py, a user's). Only the keys tpujob reads are set."""
    return (f"ACCELERATOR_TYPE: '{accelerator}'\nTOPOLOGY: '{topology or ''}'\n"
            f"WORKER_ID: '{worker}'\n")


def mig_status(stable: bool, topology: str | None, state: str) -> dict:
    status = {"isStable": stable, "bulkInstanceOperation": {"inProgress": not stable}}
    if topology:
        status["appliedAcceleratorTopologies"] = [{"acceleratorTopology": topology,
                                                   "state": state}]
    return status


def topology_of(status: dict) -> str | None:
    applied = status.get("appliedAcceleratorTopologies") or [{}]
    return applied[0].get("acceleratorTopology")

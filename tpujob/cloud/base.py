"""The cloud as the orchestrator sees it: slices, their phases, and the Cloud protocol.

Nothing here imports a client library, so the reconcile and the CLI can use these types
without paying for google-cloud imports. A slice is what an attempt runs on, by one name: on
the Cloud TPU API a TPU node (created directly, or through a queued resource of the same name),
or a multislice job's N nodes NAME-0..N-1 made by one queued resource (cloud/multislice.py); on
Compute Engine one TPU VM, or a multi-host slice's BULK managed instance group with its
instance template and workload policy (cloud/compute_tpu.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from tpujob.catalogue import TPU_VM, Api


class SlicePhase(str, enum.Enum):
    """What the orchestrator needs to know about a slice, whatever the API's states say."""

    QUEUED = "QUEUED"  # a queued resource waiting for capacity
    PROVISIONING = "PROVISIONING"  # capacity found, hosts coming up
    READY = "READY"  # every host is up: set up and run
    PREEMPTED = "PREEMPTED"  # the hardware was taken back: delete and re-create
    # A VM in its shutdown, a preempted Spot VM's notice among them: its program may be writing
    # its SIGTERM checkpoint, so nothing deletes it until it is stopped (then PREEMPTED).
    STOPPING = "STOPPING"
    FAILED = "FAILED"  # the cloud gave up on it: delete and re-create or fall back
    DELETING = "DELETING"
    GONE = "GONE"  # neither a node nor a queued resource exists


# The one table from Cloud TPU v2 states to phases (Node.State and QueuedResourceState.State
# in google/cloud/tpu_v2/types/cloud_tpu.py). TERMINATED is maintenance or end of life: the
# same remedy as a preemption. UNKNOWN is "unknown state after a failed repair".
NODE_PHASES: dict[str, SlicePhase] = {
    "CREATING": SlicePhase.PROVISIONING,
    "READY": SlicePhase.READY,
    "RESTARTING": SlicePhase.PROVISIONING,
    "REIMAGING": SlicePhase.PROVISIONING,
    "REPAIRING": SlicePhase.PROVISIONING,
    "STARTING": SlicePhase.PROVISIONING,
    "UNHIDING": SlicePhase.PROVISIONING,
    "DELETING": SlicePhase.DELETING,
    "STOPPING": SlicePhase.FAILED,
    "STOPPED": SlicePhase.FAILED,
    "HIDING": SlicePhase.FAILED,
    "HIDDEN": SlicePhase.FAILED,
    "PREEMPTED": SlicePhase.PREEMPTED,
    "TERMINATED": SlicePhase.PREEMPTED,
    "UNKNOWN": SlicePhase.FAILED,
    "STATE_UNSPECIFIED": SlicePhase.PROVISIONING,
}
# ACTIVE defers to the node's own state. SUSPENDING/SUSPENDED: the service (or a user) deleted
# the resources, which for spot capacity means a preemption.
QUEUED_RESOURCE_PHASES: dict[str, SlicePhase | None] = {
    "CREATING": SlicePhase.QUEUED,
    "ACCEPTED": SlicePhase.QUEUED,
    "WAITING_FOR_RESOURCES": SlicePhase.QUEUED,
    "PROVISIONING": SlicePhase.PROVISIONING,
    "ACTIVE": None,
    "FAILED": SlicePhase.FAILED,
    "DELETING": SlicePhase.DELETING,
    "SUSPENDING": SlicePhase.PREEMPTED,
    "SUSPENDED": SlicePhase.PREEMPTED,
    "STATE_UNSPECIFIED": SlicePhase.QUEUED,
}


def slice_phase(node_state: str | None, queued_resource_state: str | None) -> SlicePhase:
    """The phase of a slice from its node's state and its queued resource's state (None: absent)."""
    if queued_resource_state is not None:
        phase = QUEUED_RESOURCE_PHASES.get(queued_resource_state, SlicePhase.FAILED)
        if phase is not None:
            return phase
        if node_state is None:  # ACTIVE but its node was deleted under it
            return SlicePhase.FAILED
    if node_state is None:
        return SlicePhase.GONE
    return NODE_PHASES.get(node_state, SlicePhase.FAILED)


@dataclass(frozen=True)
class Host:
    index: int
    ip: str  # internal address (on the emulator: the host's own loopback address)
    external_ip: str | None = None  # accessConfig.externalIp: only on nodes created with them

    def address(self, external: bool) -> str:
        """Where to reach the host: its external address unless asked for the internal one,
        or when it has none (as gcloud's tpu-vm ssh picks: ParseWorkerFlag in
        googlecloudsdk/command_lib/compute/tpus/tpu_vm/ssh_utils.py, `--internal-ip`)."""
        return self.external_ip if external and self.external_ip else self.ip


@dataclass(frozen=True)
class DataDisk:
    source: str  # projects/P/zones/Z/disks/NAME
    read_only: bool = True


@dataclass(frozen=True)
class SliceRequest:
    project: str
    zone: str
    name: str  # node id; the queued resource, if any, has the same id
    accelerator_type: str
    runtime_version: str
    provisioning: str = "spot"  # "spot", "on-demand" or "preemptible"
    queued: bool = False  # through a queued resource (keeps a place in the queue)
    slices: int = 1  # multislice: nodes NAME-0 .. NAME-(slices-1), tpujob.cloud.multislice
    node_ids: tuple[str, ...] = ()  # these nodes instead (an elastic attempt's grown ones)
    # How long the create may wait for capacity: a queued resource's validUntilDuration; a
    # Compute Engine flex-start VM's params.requestValidForDuration (compute_tpu.flex_wait).
    valid_until_seconds: int | None = None
    api: Api = TPU_VM  # or COMPUTE: which Cloud of tpujob.cloud.apis creates it
    # The Compute Engine path (tpujob.cloud.compute_tpu): provisioning "flex-start" with its
    # run limit, "reservation" with the reservation's name.
    reservation: str | None = None
    max_run_duration_seconds: int | None = None
    boot_disk_gb: int | None = None  # Compute Engine: the boot disk's diskSizeGb (None: the image's)
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    ssh_keys: tuple[str, ...] = ()  # "USER:ssh-ed25519 AAAA... comment" lines
    data_disks: tuple[DataDisk, ...] = ()
    # networkConfig and tags: external IPs unless asked not to (gcloud sends
    # enableExternalIps = not --internal-ips); network/subnetwork None: Google's "default".
    external_ips: bool = True
    network: str | None = None
    subnetwork: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaintenanceWindow:
    """Node.upcomingMaintenance (tpu.v2.json UpcomingMaintenance): SCHEDULED or UNSCHEDULED,
    PENDING or ONGOING, and when its window opens (epoch seconds; None if the API gives none)."""

    type: str
    status: str
    start: float | None = None


@dataclass(frozen=True)
class Slice:
    name: str
    zone: str
    phase: SlicePhase
    node_state: str | None = None  # the API's own states, for `show` and events
    queued_resource_state: str | None = None
    accelerator_type: str | None = None
    hosts: tuple[Host, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    detail: str = ""  # why it failed or what it waits for, when the API says
    node_create_time: float | None = None  # epoch seconds of the node's createTime; None: no node
    # A queued resource that ended FAILED: its failedData.error typed like a create error
    # (tpujob.errors: StockoutError, QuotaExceeded, PlacementUnavailable, CloudRefused, ...).
    failure: Exception | None = field(default=None, compare=False)
    metadata: dict[str, str] = field(default_factory=dict)  # the node's (enable-oslogin: OS Login)
    # Node.health (tpu.v2.json): HEALTHY, TIMEOUT, UNHEALTHY_TENSORFLOW, UNHEALTHY_MAINTENANCE;
    # None when unspecified or no node. Symptoms as "TYPE (worker N): details".
    health: str | None = None
    symptoms: tuple[str, ...] = ()
    maintenance: MaintenanceWindow | None = None
    # Multislice: the slices (0..N-1) whose own node reads preempted, failed, deleting or gone.
    lost_slices: tuple[int, ...] = ()
    part_hosts: tuple[int, ...] = ()  # multislice: each slice's host count, in order
    # Compute Engine: short names of the data disks every VM of the slice has attached.
    data_disks: tuple[str, ...] = ()


@dataclass(frozen=True)
class TpuResource:
    """A queued resource or a node as a list shows it: what `tpujob gc` weighs and deletes."""

    kind: str  # "queued-resource", "node"; Compute Engine: "instance", "mig", "instance-template", "workload-policy"
    name: str
    zone: str
    state: str
    labels: dict[str, str] = field(default_factory=dict)  # a queued resource: its node spec's
    created: float | None = None  # epoch seconds of createTime
    accelerator_type: str | None = None
    hosts: tuple[Host, ...] = ()
    data_disks: tuple[str, ...] = ()  # node: short names of its attached disks
    spot: bool = False  # spot or preemptible (priced at the spot rate)
    metadata: dict[str, str] = field(default_factory=dict)  # a node's (enable-oslogin: who logs in)


class Cloud(Protocol):
    """Slices on a TPU cloud. Implemented by tpujob.cloud.tpu_api.GcpCloud (the Cloud TPU API) and
    tpujob.cloud.compute_tpu.ComputeTpuCloud (Compute Engine), both behind
    tpujob.cloud.apis.TpuApis (Google or the emulator).

    Errors: typed by tpujob.cloud.api_calls (StockoutError when a zone has no capacity,
    QuotaExceeded, PlacementUnavailable, PermissionDenied, NotFoundError for a missing resource
    on get, CloudError for what is retried in vain); deletes of missing resources succeed.
    """

    api_calls: int  # every HTTP request made, retries and operation polls included

    def create_node(self, request: SliceRequest, timeout: float = ...) -> Slice: ...
    # The create's operation (a multislice's: one per node, space-separated), not waited for.
    def request_node(self, request: SliceRequest) -> str: ...
    def operation_done(self, name: str, what: str, create: bool = False) -> bool: ...
    def create_queued_resource(self, request: SliceRequest, timeout: float = ...) -> Slice: ...
    def get_slice(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> Slice: ...
    def list_slices(self, project: str, zone: str) -> dict[str, Slice]: ...
    def delete_node(self, project: str, zone: str, name: str, timeout: float = ...) -> None: ...
    def delete_queued_resource(self, project: str, zone: str, name: str,
                               timeout: float = ...) -> None: ...
    def delete_slice(self, project: str, zone: str, name: str, timeout: float = ...,
                     slices: int = 1, nodes: Sequence[str] = ()) -> None: ...
    def host_keys(self, project: str, zone: str, name: str, slices: int = 1,
                  nodes: Sequence[str] = ()) -> dict[int, list[str]]: ...
    # The Cloud that serves slices made through `api` ("tpu-vm": the Cloud TPU API; "compute":
    # Compute Engine, tpujob.cloud.apis), where the job's spec says which.
    def for_api(self, api: Api) -> Cloud: ...
    # Add "USER:KEY" lines to live nodes' `ssh-keys` (a lab node joining): the nodes changed.
    def add_ssh_keys(self, project: str, zone: str, nodes: Sequence[str], lines: Sequence[str],
                     timeout: float = ...) -> list[str]: ...

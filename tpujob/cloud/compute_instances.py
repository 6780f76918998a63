"""How tpujob reads a Compute Engine TPU VM (an Instance): its status as a slice phase, its
addresses, its metadata. One home for what both slice shapes read (tpujob.cloud.compute_tpu): a
lone VM and the VMs of a multi-host slice's MIG.
"""

from __future__ import annotations

from google.cloud import compute_v1

from tpujob.cloud.base import Host, MaintenanceWindow, Slice, SlicePhase
from tpujob.cloud.disks import rfc3339

# compute.v1 discovery, Instance.status, to the phases the reconcile decides on. PENDING is
# flex-start "waiting for available capacity from Dynamic Workload Scheduler": queued.
# TERMINATED is how a preempted Spot VM (instanceTerminationAction STOP) or a failed one
# stays: "must be deleted and recreated" (cloud.google.com/tpu/docs/spot-compute), the same
# remedy as a preempted node. STOPPING/PENDING_STOP lead there, through the shutdown in which a
# preempted VM's program writes its SIGTERM checkpoint (the ACPI soft off, then the 30 s or 120 s
# notice; compute.v1 discovery, Scheduling.skipGuestOsShutdown): deleting the VM then would
# cut that save short, so they are STOPPING, left alone, as a TPU node, which reads READY
# through its notice (cloud.google.com/tpu/docs/preemptible: READY, then PREEMPTED). SUSPENDED is not asked for by
# tpujob: a VM found so is as good as lost. REPAIRING: Google restarts a failed on-demand,
# flex-start or reserved TPU VM on healthy hardware (cloud.google.com/tpu/docs/failure-recovery).
INSTANCE_PHASES: dict[str, SlicePhase] = {
    "PENDING": SlicePhase.QUEUED,
    "PROVISIONING": SlicePhase.PROVISIONING,
    "STAGING": SlicePhase.PROVISIONING,
    "REPAIRING": SlicePhase.PROVISIONING,
    "RUNNING": SlicePhase.READY,
    "PENDING_STOP": SlicePhase.STOPPING,
    "STOPPING": SlicePhase.STOPPING,
    "TERMINATED": SlicePhase.PREEMPTED,  # only with its preemption's operation: stopped_phase
    "STOPPED": SlicePhase.PREEMPTED,
    "SUSPENDING": SlicePhase.FAILED,
    "SUSPENDED": SlicePhase.FAILED,
    "DEPROVISIONING": SlicePhase.DELETING,
}


# A stopped VM (TERMINATED, STOPPED) is preempted only when Compute Engine recorded its
# preemption: a system operation `compute.instances.preempted` on it (Google's preemptible-VM
# page, "detect a preemption"; peers read it with `gcloud compute operations list
# --filter="operationType=compute.instances.preempted"`, message "Instance was preempted.": a
# user report). Any other stop is not: someone stopped it, or a host error; Google restarts an
# on-demand or reserved VM itself after a host error (automaticRestart; REPAIRING above,
# cloud.google.com/tpu/docs/failure-recovery), so one found stopped was not, and is FAILED: lost,
# with why, not counted as Google taking capacity back.
STOPPED_STATUSES = frozenset({"TERMINATED", "STOPPED"})
PREEMPTED_OPERATION = "compute.instances.preempted"


def phase_of(instance: compute_v1.Instance, preempted: frozenset[str] = frozenset()) -> tuple[SlicePhase, str]:
    """A VM's phase, and why when it is stopped: `preempted` holds the names of the zone's VMs
    with a preemption operation."""
    if instance.status in STOPPED_STATUSES:
        if instance.name in preempted:
            return SlicePhase.PREEMPTED, f"{instance.status}: preempted"
        return SlicePhase.FAILED, (f"{instance.status}, not preempted (no {PREEMPTED_OPERATION} operation): "
                                   "stopped, or a host error Google did not repair")
    return INSTANCE_PHASES.get(instance.status, SlicePhase.FAILED), ""


def shorten(ref: str) -> str:
    """The last part of a resource URL (`zones/Z/machineTypes/M` -> `M`)."""
    return ref.rstrip("/").rsplit("/", 1)[-1] if ref else ""


def read_address(instance: compute_v1.Instance) -> tuple[str, str | None]:
    """(internal, external or None) of the VM's first interface; ("", None) before it has one."""
    nic = instance.network_interfaces[0] if instance.network_interfaces else None
    if nic is None or not nic.network_i_p:
        return "", None
    external = nic.access_configs[0].nat_i_p if nic.access_configs else ""
    return nic.network_i_p, external or None


def read_hosts(instance: compute_v1.Instance) -> tuple[Host, ...]:
    ip, external = read_address(instance)
    return (Host(0, ip, external),) if ip else ()


def read_metadata(instance: compute_v1.Instance) -> dict[str, str]:
    return {item.key: item.value for item in instance.metadata.items}


def read_maintenance(instance: compute_v1.Instance) -> MaintenanceWindow | None:
    """The VM's `resourceStatus.upcomingMaintenance` (google-cloud-compute UpcomingMaintenance:
    type SCHEDULED/UNSCHEDULED, maintenanceStatus PENDING/ONGOING, windowStartTime): the same
    window the TPU API path reads from a node, so decide checkpoints early on either path."""
    if "upcoming_maintenance" not in instance.resource_status:
        return None
    found = instance.resource_status.upcoming_maintenance
    return MaintenanceWindow(type=found.type_ or "UNKNOWN_TYPE", status=found.maintenance_status or "UNKNOWN",
                             start=rfc3339(found.window_start_time))


def read_slice(instance: compute_v1.Instance, zone: str, preempted: frozenset[str] = frozenset()) -> Slice:
    """A lone VM as a single-host slice: an unknown status is FAILED; a stopped one
    PREEMPTED only if its preemption was recorded (phase_of)."""
    phase, why = phase_of(instance, preempted)
    return Slice(name=instance.name, zone=zone, phase=phase, node_state=instance.status,
                 accelerator_type=shorten(instance.machine_type),
                 hosts=read_hosts(instance) if phase == SlicePhase.READY else (),
                 labels=dict(instance.labels), detail=why or instance.status_message or "",
                 node_create_time=rfc3339(instance.creation_timestamp), metadata=read_metadata(instance),
                 data_disks=read_data_disks(instance), maintenance=read_maintenance(instance))


def read_data_disks(instance: compute_v1.Instance) -> tuple[str, ...]:
    """Short names of the VM's attached data disks (not its boot disk)."""
    return tuple(sorted(shorten(d.source) for d in instance.disks if not d.boot and d.source))

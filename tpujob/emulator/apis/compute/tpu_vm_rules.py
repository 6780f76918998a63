"""What Compute Engine refuses about a TPU VM's instances.insert body, with Google's wordings.

Machine types (one table), the zones offering them, and the scheduling and reservation rules;
tpu_vms.py applies them. Sources: Google's cloud.google.com/compute/docs/tpus/tpu-machines and
cloud.google.com/tpu/docs/tpus-and-migs, the compute.v1 discovery document, and those named below.
Every wording no public source quotes is in WORDINGS marked "no source", to be corrected there.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.catalogue import ZONES
from tpujob.emulator.apis.compute.operations import refusal
from tpujob.emulator.apis.errors import ApiError


@dataclass(frozen=True)
class MachineType:
    name: str
    generation: str
    chips: int  # TPU chips on one VM
    zones: frozenset[str]


# Chips per VM: Compute Engine's TPU machine types page (cloud.google.com/compute/docs/tpus/
# tpu-machines): ct6e-standard-1t/4t/8t 1/4/8 v6e chips, ct5p-hightpu-4t 4 v5p chips,
# tpu7x-standard-4t 4 TPU7x chips. Zones: v6e and v5p reuse the TPU API's table
# (tpujob.catalogue.ZONES, from cloud.google.com/tpu/docs/regions-zones, which lists v6e in
# us-central1-b, us-east1-d, us-east5-a, us-east5-b, europe-west4-a... and v5p in us-central1-a,
# us-east5-a...; one page for both APIs); TPU7x: us-central1-ai1a and us-central1-c (same page).
_TPU7X_ZONES = frozenset({"us-central1-ai1a", "us-central1-c"})
MACHINE_TYPES: dict[str, MachineType] = {m.name: m for m in (
    MachineType("ct6e-standard-1t", "v6e", 1, ZONES["v6e"]),
    MachineType("ct6e-standard-4t", "v6e", 4, ZONES["v6e"]),
    MachineType("ct6e-standard-8t", "v6e", 8, ZONES["v6e"]),
    MachineType("ct5p-hightpu-4t", "v5p", 4, ZONES["v5p"]),
    MachineType("tpu7x-standard-4t", "tpu7x", 4, _TPU7X_ZONES),
)}
# Compute Engine serves TPU7x, v6e and v5p only, not v5e (cloud.google.com/compute/docs/tpus/
# tpu-machines); a v5e machine type is refused with its own words (xbill9/gemma4-dev
# HARDWARE.md, quoting gcloud for ct5lp-hightpu-1t).
REFUSED_PREFIXES = ("ct5lp-hightpu-",)

WORDINGS = {
    # terratest#1132 and GoogleCloudPlatform/bank-of-anthos#1234 quote it (400, reason
    # "invalid"); the field's value is echoed as the caller gave it.
    "unknown_machine_type": ("Invalid value for field 'resource.machineType': '{given}'. Machine "
                             "type with name '{name}' does not exist in zone '{zone}'."),
    # xbill9/gemma4-dev HARDWARE.md (the words only: the HTTP status and reason are no source's;
    # 400 "invalid" here).
    "user_agent": "This user agent is not allowed to use the machine type [{name}]",
    # No source quotes the TPU wording. This is Compute's refusal of live migration for a
    # machine with guest accelerators (400 badRequest: jenkinsci/google-compute-engine-plugin#63,
    # loft-sh/devpod#973); TPU machine types take TERMINATE only (discovery Scheduling; facts).
    "live_migration": "Instances with guest accelerators do not support live migration.",
    # No source: Google's words for a FLEX_START VM without maxRunDuration are quoted nowhere
    # we found (the requirement: cloud.google.com/compute/docs/tpus/tpu-machines, facts).
    "flex_needs_duration": ("FLEX_START instances require scheduling.maxRunDuration (the "
                            "emulator's words: Google's are quoted nowhere found)"),
    # No source: Google's words for a requestValidForDuration under 90 s are quoted nowhere found
    # (the bounds: Google's flex-start blog, below).
    "flex_wait_too_short": ("Invalid value for field 'resource.params.requestValidForDuration': "
                            "'{seconds}s'. Must be between 90 seconds and 2 hours (the emulator's words)"),
    # GoogleCloudPlatform/cluster-toolkit#4435 quotes it for a template (400, invalid); no time
    # limit was asked there, and limit-vm-runtime gives any VM a termination action with one.
    "standard_termination": ("Invalid value for field 'resource.scheduling.instanceTerminationAction': "
                             "'{action}'. You cannot specify a termination action for a VM instance that has "
                             "the standard provisioning model (default). To use instance termination action, "
                             "the VM instance must use the Spot or Reservation-Bound provisioning model."),
    # kubernetes/autoscaler cloudprovider/gce (operation error code CONDITION_NOT_MET).
    "no_reservation": "Specified reservation '{name}' does not exist.",
    "reservation_full": ("Specified reservation '{name}' does not have available resources for "
                         "the request."),
    # cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability; the
    # two spaces before "Try" are as the operation's JSON carries them
    # (CCExtractor/sample-platform#901, GoogleCloudPlatform/DataflowTemplates#2263).
    "stockout": ("The zone 'projects/{project}/zones/{zone}' does not have enough resources "
                 "available to fulfill the request.  Try a different zone, or try again later."),
}
# Operation errors: code, HTTP status. The stockout's 503: scylladb/scylla-cluster-tests#12477.
# CONDITION_NOT_MET's HTTP status: no source; 412 (conditionNotMet's usual status) here.
OPERATION_ERRORS = {"stockout": ("ZONE_RESOURCE_POOL_EXHAUSTED", 503),
                    "no_reservation": ("CONDITION_NOT_MET", 412),
                    "reservation_full": ("CONDITION_NOT_MET", 412)}


def machine_type(zone: str, given: str) -> MachineType:
    """The TPU machine type `given` (a name or URL) names in `zone`, or Compute's refusal."""
    name = given.rstrip("/").rsplit("/", 1)[-1]
    if name.startswith(REFUSED_PREFIXES):
        raise refusal(400, WORDINGS["user_agent"].format(name=name), "invalid")
    found = MACHINE_TYPES.get(name)
    if found is None or zone not in found.zones:
        raise refusal(400, WORDINGS["unknown_machine_type"].format(given=given, name=name,
                                                                   zone=zone), "invalid")
    return found


def scheduling(body: dict) -> dict:
    """The instance's Scheduling as Compute stores it, or its refusal. Defaults (compute.v1.json
    Scheduling): onHostMaintenance MIGRATE for standard instances, TERMINATE (the only choice)
    for preemptible ones, which Spot VMs are; instanceTerminationAction STOP."""
    given = dict(body.get("scheduling") or {})
    model = given.get("provisioningModel", "STANDARD")
    spot = model == "SPOT" or bool(given.get("preemptible"))
    given.setdefault("onHostMaintenance", "TERMINATE" if spot else "MIGRATE")
    if given["onHostMaintenance"] != "TERMINATE":
        raise refusal(400, WORDINGS["live_migration"], "badRequest")
    if model == "FLEX_START" and not given.get("maxRunDuration"):
        raise refusal(400, WORDINGS["flex_needs_duration"], "invalid")
    if model == "STANDARD" and given.get("instanceTerminationAction") and not given.get("maxRunDuration"):
        raise refusal(400, WORDINGS["standard_termination"].format(
            action=given["instanceTerminationAction"]), "invalid")
    given.setdefault("provisioningModel", model)
    if model in ("SPOT", "FLEX_START", "RESERVATION_BOUND") or given.get("maxRunDuration"):
        given.setdefault("instanceTerminationAction", "STOP")
    given.setdefault("automaticRestart", not spot)
    given.setdefault("preemptible", spot)
    return given


# A lone flex-start VM waits in Google's queue (PENDING) only when its insert sets
# params.requestValidForDuration, "Relative deadline for waiting for capacity. Relevant only for
# Instances.Insert API" (google-cloud-compute InstanceParams; compute.v1 discovery): "VMs only
# start if resources become available within your specified timeframe. If resources aren't
# available, then the VM creation request fails" (cloud.google.com/compute/docs/instances/
# about-flex-start-vms, "Flex-start VM wait time"); the window is "between 90 seconds and 2
# hours" (cloud.google.com/blog/products/compute/introducing-flex-start-vms-for-the-compute-
# engine-instance-api, `--request-valid-for-duration`). Without it a stocked-out zone fails the
# insert as any other VM's (the fast ZONE_RESOURCE_POOL_EXHAUSTED a user report saw; facts:
# memory-layers TPU runbook).
FLEX_WAIT_MIN, FLEX_WAIT_MAX = 90, 2 * 3600


def flex_wait(body: dict) -> float | None:
    """Seconds a FLEX_START insert may wait for capacity (params.requestValidForDuration, a
    Duration {seconds, nanos}), None when not asked; a window out of Google's bounds refused."""
    duration = ((body.get("params") or {}).get("requestValidForDuration")) or None
    if duration is None:
        return None
    seconds = float(duration.get("seconds", 0) or 0) + float(duration.get("nanos", 0) or 0) / 1e9
    if not FLEX_WAIT_MIN <= seconds <= FLEX_WAIT_MAX:
        raise refusal(400, WORDINGS["flex_wait_too_short"].format(seconds=f"{seconds:g}"), "invalid")
    return seconds


def reservation_name(body: dict) -> str | None:
    """The reservation a SPECIFIC_RESERVATION affinity names (ReservationAffinity: `values` hold
    NAME or projects/P/reservations/NAME), else None."""
    affinity = body.get("reservationAffinity") or {}
    if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
        return None
    values = affinity.get("values") or []
    if not values:
        raise ApiError(400, "Invalid value for field 'resource.reservationAffinity.values': ''. "
                            "SPECIFIC_RESERVATION needs a reservation name (emulator's words: "
                            "no source quotes Google's)")
    return values[0]

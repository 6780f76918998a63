"""The API a job's slices are made through (the Cloud TPU API or Compute Engine) and the
Compute Engine settings that follow from it: provisioning (flex-start, reservation), the
reservation's name, max_run_duration's limits, and the machine shape (ComputePlacement)."""

from __future__ import annotations

import re

from tpujob.catalogue import COMPUTE, TPU_VM, Accelerator, Api
from tpujob.compute_shapes import BOOT_DISK_GB, NoComputeShape, compute_shape, multi_host_refusal
from tpujob.errors import SpecError
from tpujob.spec.lines import field_error
from tpujob.spec.models import ComputePlacement, JobSpec

# Compute Engine's limits on scheduling.maxRunDuration: flex-start VMs "run up to seven days"
# (https://cloud.google.com/compute/docs/tpus/tpu-machines); any other VM from 30 seconds to
# 120 days, except legacy preemptible VMs, which take no time limit
# (https://cloud.google.com/compute/docs/instances/limit-vm-runtime, "Limitations").
_FLEX_START_MAX = 7 * 86400
_RUN_LIMIT_MIN, _RUN_LIMIT_MAX = 30, 120 * 86400
# reservationAffinity.values: a name, or "projects/different-project/reservations/some-
# reservation-name" for a shared one (google-cloud-compute ReservationAffinity.values), the project
# by its id or its number (issue 46's report); either may go on to a block and sub-block,
# RESERVATION[/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]] (AI-Hypercomputer/xpk's
# reservation path, a peer; gcloud `--reservation=projects/P/reservations/R/reservationBlocks/B/
# reservationSubBlocks/S` with RESERVATION_BOUND in users' scripts).
_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
RESERVATION_REF = re.compile(rf"^(?:projects/(?:[a-z][-a-z0-9]{{4,28}}[a-z0-9]|[0-9]{{1,20}})/reservations/)?"
                             rf"{_NAME}(?:/reservationBlocks/{_NAME}(?:/reservationSubBlocks/{_NAME})?)?\Z")


def _days(seconds: int) -> str:
    return f"{seconds / 86400:g} days" if seconds % 3600 == 0 and seconds >= 86400 else f"{seconds} s"


def choose_api(spec: JobSpec, acc: Accelerator, lines) -> tuple[Api, ComputePlacement | None]:
    """The API the slice is made through, its Compute Engine form, and the rules that follow
    from it: auto is compute for a generation the TPU API does not serve (TPU7x: "This page
    applies to the Cloud TPU API. For Ironwood (TPU7x), you must use Google Kubernetes Engine",
    cloud.google.com/tpu/docs/queued-resources; Compute Engine serves it:
    cloud.google.com/compute/docs/tpus/tpu-machines), tpu-vm otherwise; compute only for v5p,
    v6e, TPU7x (tpujob.compute_shapes.COMPUTE_FORMS)."""
    tpu = spec.tpu
    api: Api = tpu.api if tpu.api != "auto" else (TPU_VM if acc.generation.tpu_api else COMPUTE)
    if api == TPU_VM:
        if not acc.generation.tpu_api:
            raise field_error(f"the Cloud TPU API does not serve {acc.generation.alias} (Google: not supported on "
                              f"TPU7x and later); use api: compute (or auto)", ("tpu", "api"), lines)
        if tpu.provisioning in ("flex-start", "reservation"):
            raise field_error(f"provisioning: {tpu.provisioning} is made through Compute Engine: set tpu.api: compute "
                              "(v5p, v6e, tpu7x)", ("tpu", "provisioning"), lines)
        for key in ("reservation", "max_run_duration", "boot_disk_gb"):
            if getattr(tpu, key) is not None:
                raise field_error(f"tpu.{key} is a Compute Engine setting: set tpu.api: compute (v5p, v6e, tpu7x)",
                                  ("tpu", key), lines)
        return api, None

    try:
        shape = compute_shape(acc)
    except NoComputeShape as exc:
        raise field_error(str(exc), ("tpu", "api") if tpu.api == COMPUTE else ("tpu", "accelerator"), lines) from None
    if tpu.provisioning == "preemptible":
        raise field_error("legacy preemptible VMs are a TPU API option; Compute Engine TPU VMs are spot, "
                          "on-demand, flex-start or reservation: use provisioning: spot",
                          ("tpu", "provisioning"), lines)
    if tpu.queued and "queued" in tpu.model_fields_set:
        raise field_error("queued resources are a Cloud TPU API feature; the Compute Engine path creates VMs "
                          "directly: remove queued or set it to false", ("tpu", "queued"), lines)
    if tpu.max_slices > 1:
        raise field_error("multislice on the Compute Engine path is not supported yet: use slices: 1, or "
                          "api: tpu-vm on v5p/v6e", ("tpu", "slices"), lines)
    if tpu.runtime_version is not None:
        raise field_error(f"a Compute Engine TPU VM boots an image ({shape.image_family}), not a TPU runtime "
                          "version: remove runtime_version", ("tpu", "runtime_version"), lines)
    refused = multi_host_refusal(acc.name, shape.hosts, tpu.provisioning)
    if refused is not None:
        raise field_error(refused, ("tpu", "provisioning") if "provisioning" in tpu.model_fields_set
                          else ("tpu", "accelerator"), lines)
    if tpu.provisioning == "reservation":
        if tpu.reservation is None:
            raise SpecError("provisioning: reservation needs the reservation to consume: set tpu.reservation: "
                            "NAME", field="tpu.reservation", line=lines.get(("tpu", "provisioning")))
        if not RESERVATION_REF.fullmatch(tpu.reservation):
            raise field_error(f"{tpu.reservation!r} is not a reservation: give its name or "
                              "projects/PROJECT/reservations/NAME, optionally with /reservationBlocks/BLOCK",
                              ("tpu", "reservation"), lines)
    elif tpu.reservation is not None:
        raise field_error(f"tpu.reservation is consumed only with provisioning: reservation (not {tpu.provisioning})",
                          ("tpu", "reservation"), lines)
    limit = tpu.max_run_duration
    if tpu.provisioning == "flex-start":
        if limit is None:
            raise SpecError("provisioning: flex-start needs tpu.max_run_duration (how long the VMs may run, "
                            "at most 7 days), e.g. 24h", field="tpu.max_run_duration",
                            line=lines.get(("tpu", "provisioning")))
        if limit > _FLEX_START_MAX:
            raise field_error(f"{_days(limit)} is longer than flex-start allows: flex-start VMs run at most 7 days "
                              "(604800 s)", ("tpu", "max_run_duration"), lines)
    if limit is not None and not _RUN_LIMIT_MIN <= limit <= _RUN_LIMIT_MAX:
        raise field_error(f"{_days(limit)} is outside Compute Engine's run time limits (30 s to 120 days)",
                          ("tpu", "max_run_duration"), lines)
    return api, ComputePlacement(machine_type=shape.machine_type, hosts=shape.hosts,
                                 chips_per_host=shape.chips_per_host, topology=shape.topology,
                                 boot_disk_type=shape.boot_disk_type, image_family=shape.image_family,
                                 image_project=shape.image_project,
                                 boot_disk_gb=tpu.boot_disk_gb or BOOT_DISK_GB)


def check_fallback_api(api: str, alt: Accelerator, where: tuple, lines, provisioning: str = "") -> None:
    """Every placement is made through the job's API: a fallback accelerator must exist there."""
    if api == TPU_VM and not alt.generation.tpu_api:
        raise field_error(f"{alt.name}: the Cloud TPU API does not serve {alt.generation.alias}, and this job's "
                          "slices are made through it (tpu.api)", where, lines)
    if api == COMPUTE:
        try:
            shape = compute_shape(alt)
        except NoComputeShape as exc:
            raise field_error(f"{exc} (this job's slices are made through Compute Engine)", where, lines) from None
        refused = multi_host_refusal(alt.name, shape.hosts, provisioning) if provisioning else None
        if refused is not None:
            raise field_error(refused, where, lines)


def network_hint(api: str, external_ips: bool) -> str | None:
    """What a Compute Engine slice without external IPs needs, said before its setup fails:
    "If no external IP address is configured on the instance, Cloud NAT can be used for IPv4
    traffic" (cloud.google.com/compute/docs/ip-addresses), and "VMs in this subnetwork without
    external IP addresses can access Google APIs and services by using Private Google Access"
    (Subnetwork.privateIpGoogleAccess, compute.v1 discovery). None when it has them, or on the
    TPU API path (its own networkConfig, checked there)."""
    if api != COMPUTE or external_ips:
        return None
    return ("tpu.network.external_ips: false: the VMs have no external address, so the setup's apt, pip and "
            "downloads need Cloud NAT in the subnet's region, and Cloud Storage (the run dir, buckets) needs "
            "Private Google Access on the subnet (or Cloud NAT); without them setup fails")


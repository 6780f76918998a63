"""TPUs through Compute Engine: what an accelerator type of the catalogue becomes as Compute
Engine VMs. One VM (an instance) for a single-host slice, or a BULK managed instance group of
`hosts` VMs under a workload policy with the slice's acceleratorTopology for a multi-host one
(cloud.google.com/tpu/docs/tpus-and-migs; compute.v1 discovery document,
ResourcePolicyWorkloadPolicy).

Sources (checked 2026-11):
- Generations: "Compute Engine supports the following TPU versions: TPU7x, TPU v6e, TPU v5p"
  (https://cloud.google.com/compute/docs/tpus/tpu-machines); not v2, v3, v4, v5e.
- Machine types (same page): ct6e-standard-1t (1 chip), ct6e-standard-4t (4 chips; v6e
  slices are built from it), ct6e-standard-8t (8 chips on one VM); ct5p-hightpu-4t (4 chips;
  v5p 2x2x1 = 1 VM, 2x2x2 = 2, 2x4x4 = 8, 4x4x4 = 16); tpu7x-standard-4t (4 chips; all
  TPU7x slices). VMs = chips / chips per VM.
- Topologies: v6e is 2-D, v5p and TPU7x 3-D. Google publishes no Compute Engine list: v6e's
  follow the TPU API's v6e table
  (https://cloud.google.com/tpu/docs/v6e: v6e-1 1x1, v6e-4 2x2, v6e-8 2x4, v6e-16 4x4,
  v6e-32 4x8, v6e-64 8x8, v6e-128 8x16, v6e-256 16x16), which SkyPilot's MIG code and xpk
  accept on the same machine types; v5p and TPU7x take the xpk lists in tpujob.catalogue
  (V5P_TOPOLOGIES, TPU7X_TOPOLOGIES), the most cubic one where several have the slice's chips.
- Boot disk: "TPU7x and v6e take Hyperdisk Balanced, not Balanced PD; v5p the reverse" (the
  tpu-machines page).
- Images: family ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e (v5p, v6e) or
  ubuntu-accel-2404-amd64-tpu-tpu7x, project ubuntu-os-accelerator-images
  (GoogleCloudPlatform/cluster-toolkit; Google's create examples pass
  --image-project=ubuntu-os-accelerator-images).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.catalogue import (
    GENERATIONS,
    TPU7X_TOPOLOGIES,
    V5P_TOPOLOGIES,
    Accelerator,
    accelerator,
    count_chips,
)
from tpujob.errors import SpecError

IMAGE_PROJECT = "ubuntu-os-accelerator-images"
# The boot disk a Compute Engine TPU VM gets unless tpu.boot_disk_gb says otherwise. Google's
# default is the image's size ("the default size is the size of the sourceImage", google-cloud-
# compute AttachedDiskInitializeParams.diskSizeGb), small for JAX, a setup's packages and the
# setup cache; a Cloud TPU API VM boots with 100 GB (dstackai/dstack#1287: "A TPU VM includes a
# 100GB boot disk"), which this matches, so a job moved between the APIs has the same room.
BOOT_DISK_GB = 100


@dataclass(frozen=True)
class _ComputeForm:
    machine_type: str  # a multi-host slice's (and the default single-host) machine type
    chips_per_vm: int
    topologies: tuple[str, ...]
    boot_disk_type: str
    image_family: str
    # Single-host slices with a machine type of their own size, by chips.
    single_host: tuple[tuple[int, str, str], ...] = ()  # (chips, machine type, topology)


_V6E_2D = {16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}

COMPUTE_FORMS: dict[str, _ComputeForm] = {
    "v6e": _ComputeForm("ct6e-standard-4t", 4, tuple(_V6E_2D.values()), "hyperdisk-balanced",
                        "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e",
                        single_host=((1, "ct6e-standard-1t", "1x1"), (4, "ct6e-standard-4t", "2x2"),
                                     (8, "ct6e-standard-8t", "2x4"))),
    "v5p": _ComputeForm("ct5p-hightpu-4t", 4, V5P_TOPOLOGIES, "pd-balanced",
                        "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    "tpu7x": _ComputeForm("tpu7x-standard-4t", 4, TPU7X_TOPOLOGIES, "hyperdisk-balanced",
                          "ubuntu-accel-2404-amd64-tpu-tpu7x"),
}
COMPUTE_GENERATIONS = tuple(g.alias for name, g in GENERATIONS.items() if name in COMPUTE_FORMS)


class NoComputeShape(SpecError):
    """The accelerator type has no Compute Engine form (a generation Compute Engine does not
    serve, or a size with no known topology). Exit 2, like every spec error."""


@dataclass(frozen=True)
class ComputeShape:
    """An accelerator type as Compute Engine VMs (see COMPUTE_FORMS for the sources)."""
    accelerator: str  # the canonical accelerator type, e.g. "v6e-16"
    machine_type: str
    hosts: int  # VMs in the slice: 1 is a lone instance, more a BULK MIG with a workload policy
    chips_per_host: int
    topology: str  # the workload policy's acceleratorTopology (and TOPOLOGY in tpu-env)
    boot_disk_type: str
    image_family: str
    image_project: str = IMAGE_PROJECT

    @property
    def chips(self) -> int:
        return self.hosts * self.chips_per_host

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


def _most_cubic(topologies) -> str:
    return min(topologies, key=lambda t: (max(map(int, t.split("x"))), tuple(map(int, t.split("x")))))


def compute_shape(accelerator_type: str | Accelerator) -> ComputeShape:
    """What `accelerator_type` becomes on Compute Engine: machine type, VMs, topology, boot disk
    and image. Raises NoComputeShape for an accelerator Compute Engine does not serve, and
    SpecError for a name that is no accelerator type."""
    acc = accelerator_type if isinstance(accelerator_type, Accelerator) else accelerator(accelerator_type)
    form = COMPUTE_FORMS.get(acc.generation.name)
    if form is None:
        raise NoComputeShape(f"{acc.name}: Compute Engine serves TPU {', '.join(COMPUTE_GENERATIONS)} "
                             f"only, not {acc.generation.alias}")
    for chips, machine_type, topology in form.single_host:
        if chips == acc.chips:
            return ComputeShape(acc.name, machine_type, 1, chips, topology, form.boot_disk_type,
                                form.image_family)
    fits = [t for t in form.topologies if count_chips(t) == acc.chips]
    if not fits or acc.chips % form.chips_per_vm:
        raise NoComputeShape(f"{acc.name}: no Compute Engine topology of {acc.chips} chips is known "
                             f"for {form.machine_type}")
    return ComputeShape(acc.name, form.machine_type, acc.chips // form.chips_per_vm, form.chips_per_vm,
                        _most_cubic(fits), form.boot_disk_type, form.image_family)


# A multi-host slice on Compute Engine is a BULK managed instance group (a MIG with a TPU
# topology needs bulk mode: "MIGs with TPU accelerator topology require BULK mode in target size
# policy", a user report: facts, memory-layers TPU runbook), and "Bulk mode in MIGs is only
# supported with instance templates that specify either a reservation-bound or flex-start
# provisioning model" (cloud.google.com/compute/docs/instance-groups/bulk-create-instances-in-mig).
# So a multi-host slice here is flex-start or reservation; spot and on-demand are refused at
# validate, with the alternatives. The one place this choice lives: spec/compute_engine.py refuses it at validate,
# cloud/compute_tpu.py before any request.
MULTI_HOST_PROVISIONING = ("flex-start", "reservation")


def multi_host_refusal(accelerator: str, hosts: int, provisioning: str) -> str | None:
    """Why `provisioning` cannot make a multi-host slice of `accelerator` on Compute Engine, with
    the alternatives; None when it can."""
    if hosts <= 1 or provisioning in MULTI_HOST_PROVISIONING:
        return None
    return (f"{accelerator} is {hosts} VMs, a BULK managed instance group, which Google allows only with "
            f"flex-start or reservation provisioning (not {provisioning}): use provisioning: flex-start (with "
            "max_run_duration) or reservation, a single-VM accelerator (v6e-8, v5p-8, tpu7x-8), or api: tpu-vm "
            "for v5p and v6e")

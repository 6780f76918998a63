"""The existing data disks a Compute Engine TPU VM's body (or a MIG's instance template) names,
checked and attached as Compute Engine does: the disk must exist in the VM's zone, and a disk
is attached READ_WRITE to one VM at a time, READ_ONLY to any number ("Only one virtual machine
at a time can be attached to a disk in read-write mode", compute.v1.json AttachedDisk.mode).
The disks themselves (directories, users) are compute.ComputeEmulator's, as for TPU nodes."""

from __future__ import annotations

from typing import Any

from tpujob.emulator.apis.errors import ApiError


def entries(project: str, zone: str, disks: list[dict]) -> list[dict]:
    """The body's non-boot disks with a source, as compute.attachments reads them: a bare name
    (an instance template's AttachedDisk.source, compute.v1.json) is a disk of the VM's zone.
    Each keeps its index in the body's disks[] ("index"), for the refusal's field path."""
    found = []
    for index, disk in enumerate(disks):
        source = disk.get("source", "")
        if disk.get("boot") or not source:
            continue
        tail = source.split("/compute/v1/")[-1]
        if "/" not in tail:
            tail = f"projects/{project}/zones/{zone}/disks/{tail}"
        elif not tail.startswith("projects/"):
            tail = f"projects/{project}/{tail}"
        found.append({"sourceDisk": tail, "mode": disk.get("mode", "READ_WRITE"), "index": index})
    return found


def attach(compute: Any, vm_names: list[str], project: str, zone: str, disks: list[dict]) -> list[dict]:
    """Attach the disks `disks` names to every VM of `vm_names`, or to none: ApiError with
    Compute's words when one is missing or held read-write elsewhere (or would be written by
    two of them). Returns the entries (for compute.prepare)."""
    wanted = entries(project, zone, disks)
    if not wanted:
        return wanted
    for entry in wanted:
        try:
            compute.attachments(vm_names[0], [entry], 1)
        except ApiError as exc:
            if exc.code != 404:
                raise
            # instances.insert's words for a missing disk (400; arunoda/fastai-shell#5 quotes them).
            raise ApiError(400, f"Invalid value for field 'resource.disks[{entry['index']}].source': "
                                f"'{entry['sourceDisk']}'. The referenced disk resource cannot be "
                                "found.") from None
    attached: list[str] = []
    try:
        for name in vm_names:  # one at a time: the second writer is refused as another VM's would be
            compute.attachments(name, wanted, 1)
            compute.mark_attached(name, wanted)
            attached.append(name)
    except ApiError:
        for name in attached:
            compute.release(name)
        raise
    return wanted

"""What Google refuses about a disk: its access mode at insert (Compute), and which disks a TPU
attaches in which mode (TPU API). Pure rules over the emulator's disk records; ApiError out.

Sources:
- Compute's discovery document (compute.v1.json, revision 20261106), `Disk.accessMode`:
  READ_WRITE_SINGLE ("The default AccessMode"), READ_WRITE_MANY, READ_ONLY_MANY; "The
  AccessMode is only valid for Hyperdisk disk types."
- Google's "Attach durable block storage to a TPU VM"
  (https://cloud.google.com/tpu/docs/attach-durable-block-storage), "Access modes":
  READ_WRITE_SINGLE is the TPU API's `read-write`, READ_ONLY_MANY its `read-only`; and its table
  of the disk types each TPU version takes (tpujob.catalogue.DISK_TYPES, the one table).
"""

from __future__ import annotations

from tpujob.catalogue import NEVER_READ_ONLY, generation
from tpujob.emulator.apis.errors import ApiError
from tpujob.errors import SpecError

ACCESS_MODES = ("READ_ONLY_MANY", "READ_WRITE_MANY", "READ_WRITE_SINGLE")


def is_hyperdisk(disk_type: str) -> bool:
    return disk_type.startswith("hyperdisk-")


def access_mode_at_insert(disk_type: str, body: dict) -> str | None:
    """The accessMode a new disk gets (None: a Persistent Disk, which has none)."""
    mode = body.get("accessMode")
    if mode is not None and mode not in ACCESS_MODES:
        raise ApiError(400, f"Invalid value for field 'resource.accessMode': '{mode}'.")
    if not is_hyperdisk(disk_type):
        if mode:
            # No real payload for this case was found; worded after Compute's refusal of the
            # sibling field on a disk type that does not take it (googleapi 400 "invalid", quoted
            # in kubernetes-sigs/gcp-compute-persistent-disk-csi-driver#1830): "Invalid value for
            # field 'resource.multiWriter': 'true'. Cannot specify the multi writer field for
            # 'hyperdisk-balanced' disks, please use access mode instead."
            raise ApiError(400, f"Invalid value for field 'resource.accessMode': '{mode}'. Cannot "
                                f"specify the access mode field for '{disk_type}' disks.")
        return None
    if mode == "READ_ONLY_MANY" and disk_type in NEVER_READ_ONLY:
        # hyperdisk-balanced takes READ_WRITE_SINGLE or READ_WRITE_MANY, never READ_ONLY_MANY
        # (openshift/openshift-docs#93588). No payload of Compute's insert refusal was found: it
        # answers with its attach refusal's 400 body (google/cloud-forensics-utils#530), the
        # one real wording for this disk type and read-only use (catalogue.NEVER_READ_ONLY).
        message = NEVER_READ_ONLY[disk_type]
        raise ApiError(400, message, payload={"error": {
            "code": 400, "message": message,
            "errors": [{"message": message, "domain": "global", "reason": "badRequest"}]}})
    return mode or "READ_WRITE_SINGLE"


def check_attach(disk: dict, read_only: bool, accelerator_type: str) -> None:
    """Refuse attaching `disk` (the emulator's Compute record) to a TPU node of
    `accelerator_type` in the given mode, as Google does."""
    disk_type = disk["type"].rsplit("/", 1)[-1]
    try:
        takes = generation(accelerator_type).disk_types
    except SpecError as err:
        raise ApiError(400, f"acceleratorType {accelerator_type!r}: {err}") from err
    if disk_type not in takes:
        # The TPU API's own wording for this was not found (a pd-balanced disk on v6e fails "on
        # the GCP side": dstack#2145, issuetracker 385924880, no payload quoted). Worded after
        # Compute's refusal of a disk type a machine does not take, 400 badRequest
        # "[pd-standard, n4-standard-16] features are not compatible for creating instance."
        # (quoted in kubernetes-sigs/gcp-compute-persistent-disk-csi-driver#1212 for AttachDisk,
        # and dsub#301), with the accelerator type in the machine type's place.
        raise ApiError(400, f"[{disk_type}, {accelerator_type}] features are not compatible for "
                            "creating instance.")
    if not is_hyperdisk(disk_type):
        return
    mode = disk.get("accessMode", "READ_WRITE_SINGLE")
    if read_only and (mode == "READ_WRITE_SINGLE" or disk_type in NEVER_READ_ONLY):
        # Compute's answer (400 badRequest) to a read-only attach of a single-writer Hyperdisk,
        # quoted in google/cloud-forensics-utils#530.
        raise ApiError(400, f"{disk_type} disk type cannot be attached in read-only mode.")
    if not read_only and mode == "READ_ONLY_MANY":
        # A READ_ONLY_MANY disk "can't be written" (Google's access-mode table, above); no real
        # payload for a read-write attach was found: worded after the read-only refusal above.
        raise ApiError(400, f"{disk_type} disk with access mode READ_ONLY_MANY cannot be "
                            "attached in read-write mode.")

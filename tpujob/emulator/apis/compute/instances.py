"""A Compute Engine TPU VM as the emulator keeps it (tpu_vms.py serves the API over these): the
Instance record, its JSON, the instances.list filter, and what its image gives its hosts.
"""

from __future__ import annotations

import base64
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from tpujob.emulator.addresses import external_ip, host_ip
from tpujob.emulator.apis.bodies import copy_json, now
from tpujob.emulator.apis.compute import vm_disks
from tpujob.emulator.apis.compute.operations import API_ROOT
from tpujob.emulator.apis.compute.tpu_vm_rules import MachineType
from tpujob.emulator.apis.errors import ApiError


@dataclass
class Instance:
    project: str
    zone: str
    name: str
    body: dict
    kind: MachineType
    ip_block: int
    external_block: int | None
    reservation: tuple[str, str, str] | None = None  # (project, zone, name) it consumes
    hosts: list = field(default_factory=list)
    machines: Any = None
    booted_at: float | None = None
    deleting: bool = False
    gone: bool = False
    preempting: bool = False
    host_index: int = 0  # its host in the slice of its MIG (tpu_migs.py); 0 when alone
    on_lost: Callable[[Instance], None] | None = None  # its MIG's, told when its host dies

    @property
    def node_id(self) -> str:  # the Emulator's host faults name their target by this
        return self.name

    @property
    def ref(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"


def instance_body(inst: Instance, body: dict, sched: dict, nics: list[dict]) -> dict:
    """The Instance JSON (compute.v1.json Instance): what was asked, plus output fields."""
    zone_url = f"{API_ROOT}/projects/{inst.project}/zones/{inst.zone}"
    nic = {"kind": "compute#networkInterface", "name": "nic0",
           "network": nics[0].get("network")
           or f"{API_ROOT}/projects/{inst.project}/global/networks/default",
           "networkIP": host_ip(inst.ip_block, inst.host_index)}
    if inst.external_block is not None:  # an accessConfig asked for: its natIP is output
        nic["accessConfigs"] = [{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT",
                                 "name": "External NAT", **nics[0]["accessConfigs"][0],
                                 "natIP": external_ip(inst.external_block, 0)}]
    kept = {k: copy_json(body[k]) for k in ("labels", "disks", "description",
                                            "reservationAffinity", "serviceAccounts")
            if body.get(k)}
    for disk in kept.get("disks", []):
        if disk.get("boot"):
            # diskSizeGb: "at least 10 GB ... the default size is the size of the sourceImage"
            # (google-cloud-compute AttachedDiskInitializeParams); the accelerator images are
            # 10 GB here (BOOT_IMAGE_GB). Output as a string (int64 in JSON).
            disk["diskSizeGb"] = str(boot_disk_gb(body))
    for entry in vm_disks.entries(inst.project, inst.zone, body.get("disks", [])):
        # An attached disk's source reads back as a full URL, however it was named.
        kept["disks"][entry["index"]]["source"] = f"{API_ROOT}/{entry['sourceDisk']}"
    metadata = {"kind": "compute#metadata", "fingerprint": new_fingerprint(),
                "items": copy_json((body.get("metadata") or {}).get("items", []))}
    status = "PENDING" if sched["provisioningModel"] == "FLEX_START" else "PROVISIONING"
    return {"kind": "compute#instance", "id": str(random.randrange(1, 2**62)),
            "name": inst.name, "zone": zone_url, "status": status,
            "machineType": f"{zone_url}/machineTypes/{inst.kind.name}",
            "creationTimestamp": now(), "scheduling": sched, "metadata": metadata,
            "networkInterfaces": [nic], "selfLink": f"{zone_url}/instances/{inst.name}",
            **kept}


def new_fingerprint() -> str:
    """A metadata fingerprint: 8 bytes, URL-safe base64, as Google's read ("-goaeN2SGek=":
    cloudfoundry/bosh-google-cpi-release#159); it "changes after every request to modify or
    update metadata" (Metadata.fingerprint, google-cloud-compute), so a fresh one each write."""
    return base64.urlsafe_b64encode(os.urandom(8)).decode()


def stale_fingerprint() -> ApiError:
    """instances.setMetadata with a fingerprint that is not the VM's: "the request will fail with
    error 412 conditionNotMet" (Metadata.fingerprint, google-cloud-compute), worded as Google's
    answer quoted in cloudfoundry/bosh-google-cpi-release#159, in Compute's error shape
    (errors[] with domain and reason, as the Compute answer quoted in google/cloud-forensics-utils#530)."""
    message = "Supplied fingerprint does not match current metadata fingerprint."
    return ApiError(412, message, status="FAILED_PRECONDITION", payload={"error": {
        "code": 412, "message": message,
        "errors": [{"message": message, "domain": "global", "reason": "conditionNotMet"}]}})


# Guest attributes are off unless the VM's metadata (or its project's) sets
# `enable-guest-attributes: TRUE`: Compute Engine's "Set and query guest attributes" page
# (cloud.google.com/compute/docs/metadata/manage-guest-attributes, "Enable guest attributes";
# enabling needs compute.instances.setMetadata); a VM without it has no `hostkeys/` for the guest
# agent to write (GoogleCloudPlatform/compute-image-packages#763 writes them there;
# related-sciences/gce-github-runner#27 waited on them in vain, a user report). The emulator keeps
# no project metadata but `enable-oslogin`, so it reads the VM's own item only. What Google
# answers for a VM with them off (404, or no items) is not quoted anywhere found: no items here.
GUEST_ATTRIBUTES_KEY = "enable-guest-attributes"


def guest_attributes_enabled(body: dict) -> bool:
    """Whether the VM's metadata turns guest attributes on (the value read as Compute's
    booleans are, case-insensitively TRUE)."""
    return any(i.get("key") == GUEST_ATTRIBUTES_KEY and str(i.get("value", "")).strip().upper() == "TRUE"
               for i in (body.get("metadata") or {}).get("items", []))


# The boot image's size, which a boot disk given no diskSizeGb takes (AttachedDiskInitializeParams,
# above): small for JAX and a user's packages, so tpujob asks for more (tpu.boot_disk_gb).
BOOT_IMAGE_GB = 10


def boot_disk_gb(body: dict) -> int:
    """The boot disk's size in GB: its initializeParams.diskSizeGb, else the image's; under 10
    GB refused (the emulator's words: Google's are quoted nowhere found)."""
    boot: dict = next((d for d in body.get("disks", []) if d.get("boot")), {})
    size = int((boot.get("initializeParams") or {}).get("diskSizeGb") or BOOT_IMAGE_GB)
    if size < BOOT_IMAGE_GB:
        raise ApiError(400, f"Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '{size}'. "
                            "Disk size must be at least 10 GB (the emulator's words)")
    return size


_TERM = re.compile(r'^\(?\s*([\w.-]+)\s*(=|!=|:)\s*"?([^")\s]*)"?\s*\)?$')


def instance_filter(expression: str, fields: tuple[str, ...] = ("name", "status")):
    """A list's `filter` (compute.v1.json: "field operator value", =, != or :, terms joined by
    AND or spaces): `fields` and labels.KEY terms (instances.list: name, status; zoneOperations.list
    asks for operationType, targetLink); anything else is refused, as the emulator does not read
    it (an emulator limit, not a Google answer)."""
    terms = [t for t in re.split(r"\s+AND\s+|\)\s+\(", expression.strip()) if t] if expression \
        else []
    checks = []
    for term in terms:
        found = _TERM.match(term.strip())
        if not found or not (found[1] in fields or found[1].startswith("labels.")):
            raise ApiError(400, f"emulator limit: filter term {term!r} is not read ({', '.join(fields)} "
                                "and labels.KEY with =, != or : are)")
        checks.append(found.groups())

    def value(body: dict, path: str) -> str | None:
        return body.get("labels", {}).get(path[7:]) if path.startswith("labels.") else body.get(path)

    def match(body: dict) -> bool:
        for path, op, want in checks:
            have = value(body, path)
            if op == ":" and not (have is not None and (want == "*" or have == want)):
                return False
            if op == "=" and have != want or op == "!=" and have == want:
                return False
        return True

    return match


def prepare_vm_hosts(compute: Any, apt_lock_seconds: float, machines: Any, name: str, num_hosts: int,
                     data_disks: list[dict]) -> None:
    """What a TPU VM's image gives its hosts, as a TPU API node's (apis/tpu/api.py): the data
    disks it attaches, apt's tools, gcsfuse where Cloud Storage runs (api.ComputeEmulator.prepare),
    and apt's lock held a while after the first boot (machines/apt.py: unattended-upgrades)."""
    if hasattr(machines, "host_pids"):
        compute.prepare([machines.host_pids(i) for i in range(num_hosts)],
                        compute.attachments(name, data_disks, num_hosts))
    if hasattr(machines, "hold_apt_lock"):
        machines.hold_apt_lock(apt_lock_seconds)

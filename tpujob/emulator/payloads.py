"""Payload rules of the emulated TPU API: errors, names, accelerators, metadata, timestamps."""

from __future__ import annotations

import datetime
import json
import random
import re
from dataclasses import dataclass

from tpujob.catalogue import GENERATIONS, TPU_ZONES, ZONES, accelerator, offers, tpu_api_offers
from tpujob.errors import SpecError

TPU_RUNTIME_PORT = 8470  # what Google publishes in networkEndpoints[].port
RESOURCE_EXHAUSTED = 8  # google.rpc.Code, used in failed operations
ABORTED = 10
INTERNAL = 13
HTTP_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
               429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class ApiError(Exception):
    """An error the server answers as `{"error": {"code", "message", "status"}}`."""

    def __init__(self, code: int, message: str, status: str | None = None,
                 payload: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or HTTP_STATUS.get(code, "UNKNOWN")
        self.payload = payload  # the whole body, when a replayed answer gives it (fail-next)

    def body(self) -> dict:
        return self.payload or {"error": {"code": self.code, "message": self.message,
                                          "status": self.status}}


@dataclass(frozen=True)
class VirtualHost:
    """A host when host machines are switched off: an address, no SSH server, no host key."""

    index: int
    ip: str
    ssh_port: int
    host_key: str = ""


def host_ip(ip_block: int, index: int) -> str:
    return f"127.{16 + ip_block // 250}.{ip_block % 250}.{index + 1}"


# External addresses come from 127.1.0.0-127.15.255.255, apart from the internal ones
# (127.16+, host_ip) and from 127.0.0.0/16 (the emulator's own 127.0.0.1, Debian's 127.0.1.1):
# one block of up to 254 workers per node that asked for them.
EXTERNAL_BLOCKS = 15 * 256


def external_ip(block: int, index: int) -> str:
    return f"127.{1 + block // 256}.{block % 256}.{index + 1}"


def external_ips_enabled(node_body: dict) -> bool:
    # tpu.v2 NetworkConfig.enableExternalIps, a proto3 bool: absent means false ("Indicates that
    # external IP addresses would be associated with the TPU workers").
    return bool(node_body.get("networkConfig", {}).get("enableExternalIps"))


def stockout_message(zone: str) -> str:
    # The wording Google's TPU API uses in the failed create operation (error code 8).
    return (f'There is no more capacity in the zone "{zone}"; you can try in another zone where '
            "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def duration_seconds(value: str | None) -> float | None:
    return float(value.rstrip("s")) if value else None


def copy_json(body: dict) -> dict:
    return json.loads(json.dumps(body))


def check_id(value: str, what: str) -> None:
    if not value or len(value) > 63 or not _ID.match(value):
        raise ApiError(400, f"{what} {value!r} must match {_ID.pattern} (at most 63 characters)")


def accelerator_hosts(node_body: dict) -> int:
    name = node_body.get("acceleratorType")
    if not name:
        raise ApiError(400, "acceleratorType is required (acceleratorConfig is not emulated)")
    try:
        return accelerator(name).hosts
    except SpecError as err:
        raise ApiError(400, f"acceleratorType {name!r}: {err}") from err


def check_placement(zone: str, node_body: dict) -> None:
    """Refuse an accelerator type its zone does not offer (tpujob.catalogue.ZONES, Google's
    published table), or any TPU in a zone with none, as Google does: synchronously, the create
    call itself answers 400 INVALID_ARGUMENT, for nodes and queued resources alike (gcloud
    prints "ERROR: (gcloud.alpha.compute.tpus.queued-resources.create) INVALID_ARGUMENT: ..."
    with no operation issued, in the zone-probe logs and the sayouzone notes that quote these
    wordings; shared/FACTS.md). An accelerator type that does not exist reads the same, and so
    does one the TPU API does not serve at all (TPU7x: Compute Engine only)."""
    name = node_body.get("acceleratorType") or ""
    if offers(zone, name) and tpu_api_offers(name):
        return
    eid = f"[EID: 0x{random.getrandbits(64):016x}]"
    if zone not in TPU_ZONES:
        raise ApiError(400, f'Cloud TPU received a bad request. The requested zone "{zone}" is not '
                            f"supported. {eid}")
    raise ApiError(400, "Cloud TPU received a bad request. The requested accelerator configuration "
                        f'for accelerator type, "{name}", could not be found in the zonal accelerator '
                        f'configurations for "{zone}".; the accelerator {name} was not found in zone '
                        f"{zone} {eid}")


def accelerator_types(parent: str) -> list[dict]:
    """acceleratorTypes.list of the zone `parent` (projects/P/locations/ZONE) names: every size
    of each generation tpujob.catalogue.ZONES lists there (the same table check_placement
    refuses by), as {"acceleratorTypes": [{"name": "PARENT/acceleratorTypes/TYPE", "type":
    TYPE}, ...]} (Google's reference: https://cloud.google.com/tpu/docs/reference/rest/v2/
    projects.locations.acceleratorTypes/list; AcceleratorType's `acceleratorConfigs`, {type,
    topology}, are left out). A zone the table does not list offers nothing."""
    zone = parent.rsplit("/", 1)[-1]
    return [{"name": f"{parent}/acceleratorTypes/{gen.name}-{size}", "type": f"{gen.name}-{size}"}
            for gen in GENERATIONS.values() if gen.tpu_api and zone in ZONES[gen.name] for size in gen.sizes]


def authorized_keys(metadata: dict) -> list[str]:
    """The lines of `ssh-keys` metadata ("USER:KEY" per line, as on GCE), USER kept."""
    return [line.strip() for line in metadata.get("ssh-keys", "").splitlines() if line.strip()]


def read_json(request) -> dict:
    """A request's JSON body (werkzeug's Request), {} when empty; 400 when not a JSON object."""
    if not request.get_data():
        return {}
    try:
        body = json.loads(request.get_data())
    except ValueError as err:
        raise ApiError(400, f"invalid JSON body: {err}") from err
    if not isinstance(body, dict):
        raise ApiError(400, "the JSON body must be an object")
    return body

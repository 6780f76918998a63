"""What the TPU API accepts in a node's body and answers about it: the accelerator type (and the
zone that offers it), its hosts, external IPs, and the stockout wording."""

from __future__ import annotations

import random

from tpujob.catalogue import GENERATIONS, TPU_ZONES, ZONES, accelerator, offers, tpu_api_offers
from tpujob.emulator.apis.errors import ApiError
from tpujob.errors import SpecError

TPU_RUNTIME_PORT = 8470  # what Google publishes in networkEndpoints[].port


def external_ips_enabled(node_body: dict) -> bool:
    # tpu.v2 NetworkConfig.enableExternalIps, a proto3 bool: absent means false ("Indicates that
    # external IP addresses would be associated with the TPU workers").
    return bool(node_body.get("networkConfig", {}).get("enableExternalIps"))


def stockout_message(zone: str) -> str:
    # The wording Google's TPU API uses in the failed create operation (error code 8).
    return (f'There is no more capacity in the zone "{zone}"; you can try in another zone where '
            "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)")


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
    wordings; skypilot-org/skypilot#3840 quotes "Cloud TPU received a bad request. the accelerator
    v4-128 was not found in zone us-central2-b [EID: ...]"). An accelerator type that does not
    exist reads the same, and so does one the TPU API does not serve at all (TPU7x: Compute
    Engine only)."""
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

"""Which accelerator types each emulated zone offers: `acceleratorTypes.list` of the TPU API.

GET /v2/projects/P/locations/ZONE/acceleratorTypes answers {"acceleratorTypes": [{"name":
"projects/P/locations/ZONE/acceleratorTypes/TYPE", "type": TYPE}, ...]} (Google's reference:
https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.acceleratorTypes/list;
AcceleratorType also carries `acceleratorConfigs`, {type, topology}, left out here).

Zones per generation from Google's "TPU regions and zones" page, as checked in
shared/FACTS.md against SkyPilot's catalogue built from this very list: v4 only in
us-central2-b, and so on. A zone not listed offers nothing. Every size of the catalogue is
listed for a generation a zone offers (Google lists the sizes it configures there).
"""

from __future__ import annotations

from tpujob.catalogue import GENERATIONS

ZONES_BY_GENERATION: dict[str, tuple[str, ...]] = {
    "v2": ("us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a"),
    "v3": ("us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a"),
    "v4": ("us-central2-b",),
    "v5litepod": ("us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "us-east5-a",
                  "us-east5-b", "us-east5-c", "europe-west4-b"),
    "v5p": ("us-central1-a", "us-east5-a", "europe-west4-b"),
    "v6e": ("us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "europe-west4-a"),
}


def accelerator_types(parent: str) -> list[dict]:
    """The accelerator types of the zone `parent` (projects/P/locations/ZONE) names."""
    zone = parent.rsplit("/", 1)[-1]
    return [{"name": f"{parent}/acceleratorTypes/{gen.name}-{size}", "type": f"{gen.name}-{size}"}
            for gen in GENERATIONS.values() if zone in ZONES_BY_GENERATION.get(gen.name, ())
            for size in gen.sizes]

"""Compute Engine quotas as `regions.get` (Region.quotas[]) and `projects.get` (Project.quotas[])
answer them: each a Quota `{metric, limit, usage, owner}` (compute.v1 discovery document's
Region, Project and Quota schemas, as google-cloud-compute's generated `compute_v1.Region`,
`compute_v1.Project` and `compute_v1.Quota` types carry them; `Quota.metric` is a string field,
so a metric its `Quota.Metric` enum lacks reaches the client unchanged).

The TPU metrics Google lists in a region for TPU VMs made through Compute Engine are named by
no source at hand (the client's `Quota.Metric` enum has no TPU value): the names below are the
emulator's own invention, kept here alone, and a test sets others through `/emulator/v1/quotas`.
`GPUS_ALL_REGIONS` is a real enum value (`Quota.Metric.GPUS_ALL_REGIONS`); that it bounds TPU
VMs on Compute Engine is issue 46's claim, not a page of Google's. Limits and usage are the
emulator's own numbers and do not follow the instances it runs.
"""

from __future__ import annotations

import threading

# INVENTED names (see above): one on-demand and one preemptible metric per family this path makes.
INVENTED_TPU_METRICS: dict[str, float] = {
    "EMULATED_TPU7X_CHIPS": 64.0, "EMULATED_PREEMPTIBLE_TPU7X_CHIPS": 64.0,
    "EMULATED_TPU_V6E_CHIPS": 64.0, "EMULATED_PREEMPTIBLE_TPU_V6E_CHIPS": 64.0,
    "EMULATED_TPU_V5P_CHIPS": 64.0, "EMULATED_PREEMPTIBLE_TPU_V5P_CHIPS": 64.0,
}
# A regional metric every region lists (Quota.Metric.CPUS): a list without a TPU metric is not empty.
REGIONAL_DEFAULTS: dict[str, float] = {"CPUS": 2400.0, **INVENTED_TPU_METRICS}
PROJECT_DEFAULTS: dict[str, float] = {"GPUS_ALL_REGIONS": 16.0, "SNAPSHOTS": 5000.0}


class Quotas:
    """Per project, each region's quota list and the project's; a test replaces either whole."""

    def __init__(self) -> None:
        self._lists: dict[tuple[str, str], list[dict]] = {}  # (project, region or "") -> quotas
        self._lock = threading.Lock()

    def of(self, project: str, region: str = "") -> list[dict]:
        with self._lock:
            found = self._lists.get((project, region))
        if found is None:
            defaults = REGIONAL_DEFAULTS if region else PROJECT_DEFAULTS
            found = [{"metric": m, "limit": limit, "usage": 0.0} for m, limit in defaults.items()]
        return [dict(q) for q in found]

    def set(self, project: str, region: str, quotas: list[dict] | None) -> list[dict]:
        """Replace the list (`region` "": the project's); None: back to the defaults."""
        with self._lock:
            if quotas is None:
                self._lists.pop((project, region), None)
            else:
                self._lists[(project, region)] = [
                    {"metric": str(q["metric"]), "limit": float(q.get("limit", 0.0)),
                     "usage": float(q.get("usage", 0.0))} for q in quotas]
        return self.of(project, region)

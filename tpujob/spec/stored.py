"""A job's resolved spec, read back from the store (`Job.spec_json`) as the typed `ResolvedSpec`
it was recorded from. The one place product code turns the stored text into a spec: every
reader gets the model, never the raw JSON. A spec recorded by an older version loads with the
defaults of what it lacks (the models' own defaults). Parsed once per text: the model is frozen,
so one object serves every caller and thread."""

from __future__ import annotations

from functools import lru_cache

from tpujob.catalogue import Api
from tpujob.spec import ResolvedSpec


@lru_cache(maxsize=4096)
def _parse(text: str) -> ResolvedSpec:
    return ResolvedSpec.model_validate_json(text)


def spec_of(job) -> ResolvedSpec:
    """The job's resolved spec (`job` is any row with `spec_json`: a Job, a test's stand-in)."""
    return _parse(job.spec_json)


def api_of(job) -> Api:
    """Which of Google's TPU APIs the job's slices go through: "tpu-vm" (the Cloud TPU API) or
    "compute" (Compute Engine), as its spec resolved `tpu.api` (a spec recorded before the
    field existed: the TPU API)."""
    return spec_of(job).api

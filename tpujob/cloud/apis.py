"""Both of Google's ways to a TPU behind one slice port: the Cloud TPU API (nodes and queued
resources, tpujob.cloud.tpu_api) and Compute Engine (instances, tpujob.cloud.compute_tpu; the only
way to TPU7x). A job's spec says which (`tpu.api`, spec.stored.api_of); what names a slice goes
to that API through `for_api`; the rest (gc's listings, accelerator types) is the TPU API's
unless asked for by API. The Compute Engine client is built on first use: a store of TPU-API
jobs never imports google-cloud-compute for it."""

from __future__ import annotations

import threading
from typing import Any, Callable

from tpujob.catalogue import COMPUTE, Api


class TpuApis:
    def __init__(self, tpu_vm: Any, compute: Callable[[], Any]):
        self.tpu_vm = tpu_vm
        self._make_compute = compute
        self._compute: Any = None
        self._lock = threading.Lock()  # a sweep's workers may ask for it at once

    def for_api(self, api: Api) -> Any:
        if api == COMPUTE:
            with self._lock:
                if self._compute is None:
                    self._compute = self._make_compute()
            return self._compute
        return self.tpu_vm

    def built(self) -> list[Any]:
        """The clients made so far (a listing of every API skips the ones nobody used)."""
        return [self.tpu_vm] + ([self._compute] if self._compute is not None else [])

    @property
    def api_calls(self) -> int:
        return sum(cloud.api_calls for cloud in self.built())

    def __getattr__(self, name: str) -> Any:
        # Called only for what TpuApis itself lacks: the TPU API's methods and attributes.
        return getattr(self.tpu_vm, name)

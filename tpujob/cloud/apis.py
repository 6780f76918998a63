"""Both of Google's ways to a TPU behind one slice port: the Cloud TPU API (nodes and queued
resources, tpujob.cloud.tpu_api) and Compute Engine (instances, tpujob.cloud.compute_tpu; the only
way to TPU7x). A job's spec says which (`tpu.api`, spec.stored.api_of); what names a slice goes
to that API through `for_api`; the rest (gc's listings, accelerator types) is the TPU API's
unless asked for by API. Each client is built on its first use: a store of TPU-API jobs never
imports google-cloud-compute, and a sweep with no job to look at starts no local emulator."""

from __future__ import annotations

import threading
from typing import Any, Callable

from tpujob.catalogue import COMPUTE, TPU_VM, Api


class TpuApis:
    def __init__(self, tpu_vm: Callable[[], Any], compute: Callable[[], Any]):
        self._make: dict[Api, Callable[[], Any]] = {TPU_VM: tpu_vm, COMPUTE: compute}
        self._built: dict[Api, Any] = {}
        self._lock = threading.Lock()  # a sweep's workers may ask for a client at once

    def for_api(self, api: Api) -> Any:
        with self._lock:
            if api not in self._built:
                self._built[api] = self._make[api]()
            return self._built[api]

    @property
    def tpu_vm(self) -> Any:
        return self.for_api(TPU_VM)

    def built(self) -> list[Any]:
        """The clients made so far, the TPU API's first (a listing of every API skips the ones
        nobody used)."""
        with self._lock:
            return [self._built[api] for api in (TPU_VM, COMPUTE) if api in self._built]

    @property
    def api_calls(self) -> int:
        return sum(cloud.api_calls for cloud in self.built())

    def __getattr__(self, name: str) -> Any:
        # Called only for what TpuApis itself lacks: the TPU API's methods and attributes.
        if name.startswith("_"):  # not built yet (copy, pickle): never the client's own
            raise AttributeError(name)
        return getattr(self.tpu_vm, name)

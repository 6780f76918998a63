"""The emulated TPU VM image's Python: JAX's compile cache keyed by the slice, as on a TPU VM.

The emulator puts this directory on every emulated host's PYTHONPATH (machines.py). Python
imports `sitecustomize` at start-up; this one costs nothing until a program imports JAX.

Why: JAX writes its persistent compilation cache from process 0 only, so the other hosts of a
slice can only ever read it (jax/_src/compiler.py, _cache_write: "Only write cache entries from
the first process"). That holds on a TPU VM, where the key's accelerator part is the slice's
topology fingerprint, the same on every host (jax/_src/cache_key.py,
_hash_accelerator_config). JAX's CPU backend, which runs the emulated hosts, fingerprints each
process's own view of the devices instead, so every host but 0 computed a key no one ever
wrote, and compiled every program at every start: unlike a TPU VM, and the largest CPU cost of
the tests. Here a CPU program's accelerator part is JAX's own fallback for backends without a
topology (`_hash_devices`: the device kinds), the same on every host, as on a TPU VM. The
compile options (hashed beside it) still carry the device assignment.

Behaviour to correct if JAX changes: checked against jax 0.10.2; if `_hash_accelerator_config`
is gone the hook does nothing and hosts 1.. compile again (slower, never wrong).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_CACHE_KEY_MODULE = "jax._src.cache_key"


def _key_cpu_programs_by_slice(cache_key) -> None:
    by_topology = getattr(cache_key, "_hash_accelerator_config", None)
    by_kinds = getattr(cache_key, "_hash_devices", None)
    if by_topology is None or by_kinds is None:
        return

    def accelerator_config(hash_obj, accelerators):
        if all(device.platform == "cpu" for device in accelerators.flat):
            return by_kinds(hash_obj, accelerators)
        return by_topology(hash_obj, accelerators)

    cache_key._hash_accelerator_config = accelerator_config


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when JAX's cache_key module is found, patches it once loaded."""

    def find_spec(self, name, path, target=None):
        if name != _CACHE_KEY_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _key_cpu_programs_by_slice(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _chain_to_the_next_sitecustomize() -> None:
    """This module shadows the one the interpreter or venv ships (Debian's, for one): run it."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


sys.meta_path.insert(0, _PatchOnImport())
_chain_to_the_next_sitecustomize()

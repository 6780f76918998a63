"""The emulated TPU VM image's Python: JAX's compile cache keyed by the slice, as on a TPU VM.

The emulator puts this directory on every emulated host's PYTHONPATH (slice.py). Python
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

And one compile per program on this machine: a TPU VM's hosts compile a slice's program side
by side, each on CPUs of its own; the emulated hosts share this machine's few. A process about
to compile a program for JAX's persistent cache holds a lock named by the program's cache key
(a file in _LOCKS, which every host sees) while it compiles and writes the entry, whatever its
process index (JAX writes from process 0 only, to spare a shared bucket the contention; the
emulated hosts' caches are one local directory, or a run dir whose mount caches no metadata).
A process that finds the lock held waits, then reads what the holder wrote: the slice pays one
compile, as a TPU VM's hosts pay one each in parallel. A holder of another job, whose cache is
elsewhere, costs the waiter its wait and then its own compile.
JAX's own `jax_share_binary_between_hosts` is not used: a host that hits the cache while another
misses leaves the other waiting on a key no one sets (NVIDIA/JAX-Toolbox#612 reverted it for
hangs), and the suite's jobs fill one cache side by side.

Behaviour to correct if JAX changes: checked against jax 0.10.2; if `_hash_accelerator_config`
is gone the key hook does nothing and hosts 1.. compile again, and if `_compile_and_write_cache`
is gone the lock does nothing (slower, never wrong).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time

_CACHE_KEY_MODULE = "jax._src.cache_key"
_COMPILER_MODULE = "jax._src.compiler"
# Outside every host's own directories (machines.HOST_DIRS), so all of them see one lock.
_LOCKS = "/var/tmp/tpujob-emulated-image/compiling"
# A compile under the suite's load takes up to a minute here; past this a waiter compiles itself
# (a holder stopped with SIGSTOP never lets go).
_LOCK_WAIT_S = 300.0


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


def _take(fd: int) -> bool | None:
    """Waits for the lock on `fd`: whether another process held it first (then its entry may be
    in the cache); None where it cannot be had (compile without it)."""
    import fcntl

    waited, deadline = False, time.monotonic() + _LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return waited
        except BlockingIOError:
            if time.monotonic() > deadline:
                return None
            waited = True
            time.sleep(0.05)
        except OSError:
            return None


@contextlib.contextmanager
def _compile_lock(cache_key: str):
    """Holds the program's lock while the block runs; yields what _take says."""
    try:
        os.makedirs(_LOCKS, exist_ok=True)
        fd = os.open(os.path.join(_LOCKS, cache_key), os.O_CREAT | os.O_RDWR, 0o666)
    except OSError:
        yield None
        return
    try:
        yield _take(fd)
    finally:
        os.close(fd)  # lets go of the lock too


def _compile_once_per_program(compiler) -> None:
    compile_and_write = getattr(compiler, "_compile_and_write_cache", None)
    if compile_and_write is None:
        return
    from jax._src import compilation_cache, config, distributed

    def compile_write_or_read(backend, computation, executable_devices, compile_options,
                              host_callbacks, module_name, cache_key):
        with _compile_lock(cache_key) as waited:
            if waited:
                executable, _ = compiler._cache_read(module_name, cache_key, compile_options,
                                                     backend, executable_devices)
                if executable is not None:
                    return executable
            if distributed.global_state.process_id == 0 or waited is None:
                return compile_and_write(backend, computation, executable_devices, compile_options,
                                         host_callbacks, module_name, cache_key)
            # Process k: JAX's _cache_write would skip the entry; write it on its rules.
            start = time.monotonic()
            executable = compiler.backend_compile_and_load(backend, computation, executable_devices,
                                                           compile_options, host_callbacks)
            took = time.monotonic() - start
            if not host_callbacks and took >= config.persistent_cache_min_compile_time_secs.value:
                try:
                    compilation_cache.put_executable_and_time(cache_key, module_name, executable,
                                                              backend, int(took))
                except Exception:  # an entry not written is a compile for the next process
                    pass
            return executable

    compiler._compile_and_write_cache = compile_write_or_read


_PATCHES = {_CACHE_KEY_MODULE: _key_cpu_programs_by_slice, _COMPILER_MODULE: _compile_once_per_program}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when one of JAX's modules above is found, patches it once loaded."""

    def __init__(self):
        self.waiting = dict(_PATCHES)

    def find_spec(self, name, path, target=None):
        patch = self.waiting.pop(name, None)
        if patch is None:
            return None
        if not self.waiting:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            patch(module)

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

"""Orbax checkpoints of the whole train state (params, Adam moments, step), sharded per host.

Async by default: `save` returns once the arrays are copied off the devices, and the write to
the run dir (gcsfuse, or gs:// through tensorstore) overlaps the next steps. Before a preemption
exit, `wait` makes sure the last save is committed.

A save is committed by a `commit_success.txt` written last into its step directory, never by
renaming a temporary directory: gcsfuse renames a directory by copying and then deleting each
object, so a host killed mid-rename left a step directory with some arrays missing that Orbax's
default (rename) mode took for complete, and every later attempt failed restoring it. Orbax
documents COMMIT_FILE as the mode for gcsfuse (`orbax.checkpoint.options.AtomicityOptions`); it
is right on a local disk too, so it is the mode everywhere. A step without the file is not a
checkpoint: the previous one stays the latest.
"""

from __future__ import annotations

import time
from typing import Any

import orbax.checkpoint as ocp
from orbax.checkpoint import options as ocp_options


def _barriers_with_timeouts() -> None:
    """Orbax's barriers through the JAX distributed client (a wait with a timeout, 300 s by
    default) instead of a collective over every device. A collective barrier waits for the
    slowest host inside the collective itself: on CPU hosts (the emulator) a host restoring
    30 s behind the others failed the whole attempt with "Gloo context initialization failed:
    DEADLINE_EXCEEDED", and on TPU a host that never comes hangs it. The switch is Orbax's
    absl flag `experimental_orbax_use_distributed_barrier` (orbax/checkpoint/_src/multihost/
    multihost.py); the runtime parses no absl flags of its own, so they are marked parsed."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    flags.FLAGS.experimental_orbax_use_distributed_barrier = True  # type: ignore[assignment]  # absl's stub


class Checkpointer:
    def __init__(self, directory: str, keep: int, use_async: bool):
        _barriers_with_timeouts()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            enable_async_checkpointing=use_async,
            create=True,
            cleanup_tmp_directories=True,  # leftovers of a save killed mid-write
            atomicity_options=ocp_options.AtomicityOptions(mode=ocp_options.AtomicityMode.COMMIT_FILE),
        )
        self._manager = ocp.CheckpointManager(directory, options=options)
        self.seconds = 0.0  # time the train loop spent blocked in checkpointing
        self.save_started: float | None = None  # perf_counter() when the last save began

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def restore(self, step: int, target: Any) -> Any:
        """Restore into `target` (ShapeDtypeStructs with shardings): each host reads its shards."""
        t0 = time.perf_counter()
        state = self._manager.restore(step, args=ocp.args.StandardRestore(target))
        self.seconds += time.perf_counter() - t0
        return state

    def save(self, step: int, state: Any) -> None:
        t0 = self.save_started = time.perf_counter()
        self._manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self.seconds += time.perf_counter() - t0

    def in_flight(self) -> bool:
        """An async save of this host is still being written."""
        return self._manager.is_saving_in_progress()

    def wait(self) -> None:
        t0 = time.perf_counter()
        self._manager.wait_until_finished()
        self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        self._manager.close()

"""The train loop: restore or initialise, check, step, log, checkpoint, stop cleanly.

Every host runs the same control flow: each decision (log, save, stop, NaN) derives from the step
number or from metrics that the train step reduced over all hosts, so the hosts always enter
collective operations (a checkpoint save) together.

Metrics of step s are fetched after step s+1 is dispatched, so the host never idles the devices
waiting for a scalar; before any checkpoint the pending metrics are checked first, so a
non-finite state is never saved.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from . import contract, initcheck, metadata, model, peaks, train
from .checkpoint import Checkpointer
from .config import ConfigError, RuntimeConfig
from .data import Batches
from .distributed import HostEnv, on_tpu_vm
from .metrics import Heartbeat, MetricsLog
from .preemption import Preemption
from .spacing import Spacing

log = logging.getLogger("tpujob.runtime")


class InitCheckError(RuntimeError):
    def __init__(self, table: str, bad: list[str]):
        super().__init__(f"initialisation check failed for {', '.join(bad)}")
        self.table = table
        self.bad = bad


@dataclass
class RunEnd:
    state: str
    step: int
    message: str
    exit_code: int
    compiles: int = 0
    resumed_from: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _env_seconds(name: str) -> float | None:
    """A number of seconds from the environment, None where unset or not a positive number."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def mxu_warning(cfg: RuntimeConfig, gen: str | None) -> str | None:
    """Dims off the MXU tile (128; 256 on v6e) pad every matmul: worth a warning, not a refusal."""
    multiple = peaks.mxu_multiple(gen)
    misaligned = model.misaligned_dims(cfg.model, multiple)
    if not misaligned:
        return None
    return f"dims not multiples of {multiple} pad the MXU: {', '.join(misaligned)}"


def _generation(cfg: RuntimeConfig) -> str | None:
    if cfg.accelerator != "auto":
        return peaks.generation(cfg.accelerator)
    return peaks.generation_from_device_kind(jax.devices()[0].device_kind)


def elastic_microbatches(cfg: RuntimeConfig, host: HostEnv, n_devices: int) -> RuntimeConfig:
    """An elastic job on fewer slices than it has at most (TPUJOB_MAX_SLICES): the same global
    batch in max/current times the microbatches, so each device's share of a step, and its
    memory, stays what it is on all of them; or, where that does not divide, unchanged, saying
    why (each device then takes a larger share)."""
    if host.max_slices <= host.num_slices:
        return cfg
    factor, rest = divmod(host.max_slices, host.num_slices)
    parts = cfg.microbatches * factor
    if rest or cfg.batch_size % (parts * n_devices):
        why = (f"{host.num_slices} slices do not divide {host.max_slices}" if rest else
               f"batch_size {cfg.batch_size} is not a multiple of {parts} microbatches x {n_devices} devices")
        log.warning("on %d of %d slices: %s, so each device takes a larger share of the global batch",
                    host.num_slices, host.max_slices, why)
        return cfg
    log.info("on %d of %d slices: %d microbatches a step (of %d rows each), the global batch of %d kept",
             host.num_slices, host.max_slices, parts, cfg.batch_size // parts, cfg.batch_size)
    return dataclasses.replace(cfg, microbatches=parts)


class Trainer:
    def __init__(self, cfg: RuntimeConfig, host: HostEnv, started: float | None = None):
        self.cfg, self.host = cfg, host
        # time.monotonic() when the process began its work: the start-up report counts from it.
        self.started = time.monotonic() if started is None else started
        self.restore_seconds = 0.0
        self.mesh = train.make_mesh(host.num_slices)
        self.n_devices = self.mesh.devices.size
        self.cfg = cfg = elastic_microbatches(cfg, host, self.n_devices)
        if cfg.batch_size % (cfg.microbatches * self.n_devices):
            per = (f"{cfg.microbatches} microbatches x {self.n_devices} devices" if cfg.microbatches > 1
                   else f"the {self.n_devices} devices")
            raise ConfigError(f"{cfg.batch_size} is not a multiple of {per}", key="batch_size")
        self.generation = gen = _generation(cfg)
        self.peak = peaks.peak_flops(gen)
        if warning := mxu_warning(cfg, gen):
            log.warning("%s", warning)
        self.is_main = jax.process_index() == 0
        run_dir = host.run_dir
        info = {"job_id": host.job_id, "attempt": host.attempt, "host": host.host_index, "total": cfg.steps}
        self.heartbeat = Heartbeat(run_dir, cfg.heartbeat_every_s, self.is_main, info)
        self.metrics = MetricsLog(run_dir, self.is_main)
        ckpt_dir = cfg.checkpoint_dir or str((run_dir / contract.CHECKPOINT_DIR).absolute())
        self.ckpt = Checkpointer(ckpt_dir, cfg.keep, cfg.async_checkpoint)
        self.compiler = train.StepCompiler(cfg, self.mesh)
        self.batches = Batches(cfg.data, cfg.seed, cfg.batch_size, cfg.seq_len, cfg.model.vocab_size)
        self.sharding = train.batch_sharding(self.mesh)
        rows = self.sharding.addressable_devices_indices_map((cfg.batch_size, 1))
        if any(idx is None for idx in rows.values()):  # jax's type allows it; a batch sharding has none
            raise RuntimeError("a device of this process holds no rows of the batch")
        spans = [idx[0] for idx in rows.values() if idx is not None]
        self.row_lo = min(s.start or 0 for s in spans)
        self.row_hi = max(s.stop or cfg.batch_size for s in spans)
        self.flops_per_token = model.flops_per_token(cfg.model, cfg.seq_len)
        self.resumed_from: int | None = None
        self.step = 0  # the newest step dispatched: what status.json reports if training breaks
        self.loop_seconds = 0.0
        auto = cfg.checkpoint_every == "auto"
        self.spacing = Spacing(None if auto else int(cfg.checkpoint_every),
                               _env_seconds(contract.ENV_MTBI_SECONDS) if auto else None)
        self.checkpoint_stall = 0.0  # seconds saves blocked training, this attempt
        self.step_seconds: float | None = None  # the mean step, past the first (compile)

    # -- start -------------------------------------------------------------------------------

    def start_state(self) -> dict:
        latest = self.ckpt.latest_step()
        if latest is not None:
            self.heartbeat.update(step=latest, phase="restoring")
            log.info("restoring checkpoint at step %d", latest)
            self.resumed_from = latest
            self.heartbeat.resumed_from = latest
            return self.ckpt.restore(latest, train.abstract_state(self.cfg, self.mesh))
        self.heartbeat.update(phase="initialising")
        state = train.init_state(self.cfg, self.mesh)
        if self.cfg.init_check:
            rows = initcheck.check_init(state["params"], model.init_rules(self.cfg.model))
            bad = [r.name for r in rows if r.problem]
            if bad:
                raise InitCheckError(initcheck.format_table(rows), bad)
        return state

    # -- steps -------------------------------------------------------------------------------

    def _device_batch(self, step: int, seq_len: int) -> jax.Array:
        local = self.batches.rows(step, self.row_lo, self.row_hi, seq_len)
        shape = (self.cfg.batch_size, seq_len + 1)
        return jax.make_array_from_process_local_data(self.sharding, local, shape)

    def _flags(self, stop: bool, poison: bool) -> jax.Array:
        row = np.array([[int(stop), int(poison)]], np.int32)
        local = np.tile(row, (len(self.mesh.local_devices), 1))
        return jax.make_array_from_process_local_data(self.sharding, local, (self.n_devices, 2))

    def _record(self, step: int, m: dict, compiles: int, window: tuple[float, int]) -> None:
        seconds, steps = window
        step_time = seconds / steps if steps else float("nan")
        if steps:
            self.step_seconds = step_time
            self._report_ledger()
        tokens_per_s = self.cfg.batch_size * self.cfg.seq_len / step_time if steps else None
        mfu = peaks.mfu(self.flops_per_token, tokens_per_s or 0.0, self.generation, self.n_devices)
        self.metrics.write({
            "step": step, "time": time.time(), "loss": m["loss"], "lr": m["lr"],
            "grad_norm": m["grad_norm"], "step_time_s": step_time if steps else None,
            "tokens_per_s": tokens_per_s, "mfu": mfu, "compiles": compiles,
        })

    def run(self, preemption: Preemption) -> RunEnd:
        """Restore the latest checkpoint and train; `preemption`: the notice, listened for by
        the caller since before the hosts joined (main.py)."""
        cfg = self.cfg
        url = metadata.preempted_url(os.environ, on_tpu_vm()) if cfg.preempted_poll_s > 0 else None
        poller = metadata.PreemptedPoller(url, cfg.preempted_poll_s, preemption.notice).start() if url else None
        self.heartbeat.start()
        try:
            t0 = time.monotonic()
            state = self.start_state()
            self.restore_seconds = time.monotonic() - t0
            step = self.step = int(jax.device_get(state["step"]))
            return self._loop(state, step, preemption)
        finally:
            if poller is not None:
                poller.stop()
            self.heartbeat.update(phase="exiting")
            self.heartbeat.stop()
            self.metrics.close()
            self.ckpt.close()

    def _loop(self, state: dict, step: int, preemption: Preemption) -> RunEnd:
        cfg = self.cfg
        pending: tuple[int, dict, int] | None = None  # step, metrics on device, compiles
        stop_at: int | None = None
        window_start, window_steps, first = time.perf_counter(), 0, True
        loop_start = saved_at = time.perf_counter()
        last_saved = self.resumed_from

        def consume() -> RunEnd | None:
            nonlocal pending, stop_at, window_start, window_steps, first
            if pending is None:  # called only with a step pending
                raise RuntimeError("no step pending to consume")
            s, m_dev, compiles = pending
            pending = None
            m = {k: float(v) for k, v in jax.device_get(m_dev).items()}
            if not (math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])):
                return self._outcome(contract.STATE_NAN, s, contract.EXIT_NAN,
                                     f"non-finite loss {m['loss']} / grad norm {m['grad_norm']} "
                                     f"at step {s}; last good checkpoint {last_saved}")
            if m["stop"] and stop_at is None:
                stop_at = step  # the newest dispatched step: the same on every host
            now = time.perf_counter()
            if first:  # the first step carries the compile: keep it out of throughput
                first, window_start = False, now
                self._report_startup(s)
            else:
                window_steps += 1
            if s % cfg.log_every == 0 or s == cfg.steps or stop_at is not None:
                self._record(s, m, compiles, (now - window_start, window_steps))
                window_start, window_steps = now, 0
            return None

        while step < cfg.steps:
            s = step + 1
            # Drills fire on host 0 only: the other hosts must follow through the step's flags.
            drill = self.host.host_index == 0
            if drill and cfg.inject_sigterm_at_step == s:
                os.kill(os.getpid(), signal.SIGTERM)
            if drill and cfg.inject_sigkill_at_step == s:
                os.kill(os.getpid(), signal.SIGKILL)
            poison = drill and cfg.inject_nan_at_step == s
            seq_len = cfg.seq_len // 2 if cfg.inject_shape_change_at_step == s else cfg.seq_len
            tokens = self._device_batch(step, seq_len)
            before = self.compiler.compiles
            state, m_dev = self.compiler(state, tokens, self._flags(preemption.requested, poison))
            if self.compiler.compiles > before and before > 0:
                log.warning("train step recompiled at step %d (compiles: %d): batch %s",
                            s, self.compiler.compiles, tokens.shape)
            step = self.step = s
            self.heartbeat.update(step=s - 1, phase="training")
            if pending is not None and (bad := consume()) is not None:
                return bad
            pending = (s, m_dev, self.compiler.compiles)
            since_save = time.perf_counter() - saved_at
            save = self.spacing.due(s, since_save) or s == cfg.steps or stop_at is not None
            if save:
                if (bad := consume()) is not None:
                    return bad
                self.heartbeat.update(step=s, phase="checkpointing")
                if not bool(train.all_finite(state["params"])):
                    return self._outcome(contract.STATE_NAN, s, contract.EXIT_NAN,
                                         f"non-finite parameters at step {s}; not saved")
                if stop_at is not None and not self._stop_save_fits(preemption):
                    return self._skip_stop_save(s, last_saved, preemption.source)
                stall = time.perf_counter()
                self.ckpt.save(s, state)
                saved_at = time.perf_counter()
                self.spacing.saved(saved_at - stall)
                self.checkpoint_stall += saved_at - stall
                self._report_ledger()
                last_saved = s
            self.heartbeat.update(step=s, phase="training")
            if stop_at is not None:
                self.ckpt.wait()
                self.loop_seconds = time.perf_counter() - loop_start
                return self._outcome(contract.STATE_PREEMPTED, s, contract.EXIT_PREEMPTED,
                                     f"{preemption.source}: checkpoint written at step {s}")
        self.ckpt.wait()
        self.loop_seconds = time.perf_counter() - loop_start
        return self._outcome(contract.STATE_SUCCEEDED, step, contract.EXIT_SUCCESS,
                             f"trained {step} steps")

    def _report_startup(self, step: int) -> None:
        """Where the seconds before the first step went: the log and the heartbeat say it, so a
        slow recovery is explained (a restore over a slow mount, a compile the cache missed)."""
        startup = {
            "first_step_s": round(time.monotonic() - self.started, 2),
            "restore_s": round(self.restore_seconds, 2) if self.resumed_from is not None else None,
            "init_s": None if self.resumed_from is not None else round(self.restore_seconds, 2),
            "compile_s": round(self.compiler.compile_seconds, 2),
            "compile_cache": self.compiler.first_cache,
            "mesh": dict(self.mesh.shape),  # {"fsdp": N}; several slices: {"slices": S, "fsdp": N}
            "microbatches": self.cfg.microbatches,  # an elastic job on fewer slices: more
        }
        self.heartbeat.startup = startup
        self._report_ledger()
        what = (f"restore {startup['restore_s']} s (step {self.resumed_from})" if self.resumed_from is not None
                else f"init {startup['init_s']} s")
        log.info("step %d done %.1f s after start: %s, compile %.2f s (cache %s)", step,
                 startup["first_step_s"], what, startup["compile_s"], startup["compile_cache"])

    def _report_ledger(self) -> None:
        """What only this program knows of where its time went, for tpujob's ledger
        (service/ledger.Reported): whole milliseconds, flat, as status.sh reads them."""
        startup = self.heartbeat.startup or {}
        restore = startup.get("restore_s") or 0.0

        def ms(seconds: float | None) -> int | None:
            return None if seconds is None else int(seconds * 1000)

        self.heartbeat.ledger = {k: v for k, v in {
            "compile_ms": ms(self.compiler.compile_seconds), "restore_ms": ms(restore),
            "checkpoint_ms": ms(self.checkpoint_stall), "step_ms": ms(self.step_seconds),
            "save_ms": ms(self.spacing.save_seconds),
            "interval_ms": ms(self.spacing.interval) if self.spacing.every is None else None,
            "mtbi_ms": ms(self.spacing.mtbi) if self.spacing.every is None else None}.items() if v is not None}

    def _stop_save_fits(self, preemption: Preemption) -> bool:
        """Save in place, unless an async save still in flight makes that impossible within the
        grace: that save is finished first, and if it took longer than what is left of the grace
        (another save would take as long), the stop save would be killed mid-write. Every host
        takes the same branch (a save is collective): each host's answer is gathered."""
        if not self._any_host(self.ckpt.in_flight()):
            return True
        started = self.ckpt.save_started
        self.ckpt.wait()
        one_save = time.perf_counter() - started if started is not None else 0.0
        return not self._any_host(one_save >= preemption.seconds_left())

    @staticmethod
    def _any_host(flag: bool) -> bool:
        if jax.process_count() == 1:
            return flag
        from jax.experimental import multihost_utils

        return bool(np.any(multihost_utils.process_allgather(np.array([flag]))))

    def _skip_stop_save(self, step: int, saving: int | None, source: str) -> RunEnd:
        """The save in flight is finished (_stop_save_fits waited for it); a second one would not
        fit in the grace and a process killed mid-write keeps nothing of it: skipped, the next
        attempt resumes from the one finished, and status.json says so."""
        message = (f"{source} at step {step}: the checkpoint of step {saving} was still being "
                   f"written and took longer than the rest of the {self.cfg.sigterm_grace_s:.0f} s "
                   f"grace, so the stop save was skipped; resumes from step {saving}")
        log.warning("%s", message)
        self.ckpt.wait()
        outcome = self._outcome(contract.STATE_PREEMPTED, step, contract.EXIT_PREEMPTED, message)
        outcome.extra.update(stop_save="skipped", saved_step=saving)
        return outcome

    def _outcome(self, state: str, step: int, code: int, message: str) -> RunEnd:
        self._report_ledger()
        return RunEnd(state, step, message, code, self.compiler.compiles, self.resumed_from,
                       extra={"checkpoint_seconds": round(self.ckpt.seconds, 3),
                              "compile_seconds": round(self.compiler.compile_seconds, 3)})

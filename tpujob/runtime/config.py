"""The runtime's config: a YAML file (or the job spec's `run.runtime` mapping) -> frozen dataclasses.

Pure (pyyaml only), so the orchestrator can validate `run.runtime` at `create`, before a slice
is paid for. Unknown keys are errors naming the key: a misspelt `checkpoint_evry` must not
silently train for days without checkpoints.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .contract import HEARTBEAT_MAX_INTERVAL_S
from .peaks import generation


class ConfigError(ValueError):
    """The config is invalid; `key` is the dotted path of the offending key, when there is one."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer. Any field given next to `preset` overrides the preset's."""

    preset: str = "tiny"
    n_layer: int = 2
    n_head: int = 2
    d_model: int = 128
    d_ff: int = 512
    vocab_size: int = 512
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


# GPT-2 shapes (vocab padded from 50257 to a multiple of 128 for the MXU); "1b" is ~1.1B.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(n_layer=2, n_head=2, d_model=128, d_ff=512, vocab_size=512),
    "124m": dict(n_layer=12, n_head=12, d_model=768, d_ff=3072, vocab_size=50304),
    "350m": dict(n_layer=24, n_head=16, d_model=1024, d_ff=4096, vocab_size=50304),
    "1b": dict(n_layer=20, n_head=16, d_model=2048, d_ff=8192, vocab_size=50304),
}


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with linear warmup then cosine decay to `min_lr_ratio * lr`, and global-norm clipping."""

    lr: float = 3e-4
    warmup_steps: int = 10
    decay_steps: int | None = None  # default: the run's `steps`
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0


@dataclass(frozen=True)
class DataConfig:
    """`synthetic` (random tokens) or `shards`: a directory of nanoGPT-style .bin token files."""

    kind: str = "synthetic"
    path: str | None = None
    dtype: str = "uint16"  # of the .bin files when the directory has no meta.json


@dataclass(frozen=True)
class RuntimeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    batch_size: int = 8  # global, over all hosts; a multiple of the number of devices
    # Gradient accumulation: each step's batch in this many equal parts, one forward and
    # backward each, one optimizer update (activations of one part in memory at a time).
    # batch_size must be a multiple of microbatches x devices.
    microbatches: int = 1
    seq_len: int = 128
    steps: int = 100
    seed: int = 0
    # Steps between checkpoints, or "auto": Young's interval for the save cost this program
    # measures and the time between interruptions tpujob measured (runtime/spacing.py).
    checkpoint_every: int | str = 100
    keep: int = 3
    async_checkpoint: bool = True
    checkpoint_dir: str | None = None  # default: $TPUJOB_RUN_DIR/checkpoints; may be gs://...
    strict_shapes: bool = False
    accelerator: str = "auto"  # "v4-8", "v5litepod-16", "h100", "cpu"; auto: from the devices
    log_every: int = 10
    heartbeat_every_s: float = 10.0
    distributed_timeout_s: int = 300
    # After a first SIGTERM (or the metadata server's instance/preempted turning TRUE) the loop
    # checkpoints at the next step boundary; a process still alive this long after it is
    # blocked and ends. Spot VMs get 30 s from the shutdown signal to power off (compute.v1
    # discovery document, Scheduling; cloud.google.com/compute/docs/tpus/tpu-machines: "with a
    # 30-second warning"), so the default leaves 5 s of it for the exit and the status file.
    sigterm_grace_s: float = 25.0
    # How often the metadata server's instance/preempted is read (0: never). Only where one
    # exists: on a TPU VM, or where GCE_METADATA_HOST names it (the emulator's hosts).
    preempted_poll_s: float = 5.0
    init_check: bool = True
    # Fault injection for tests and drills; each goes through the same path as the real fault.
    inject_nan_at_step: int | None = None
    inject_bad_init: bool = False
    inject_shape_change_at_step: int | None = None
    inject_sigterm_at_step: int | None = None
    inject_sigkill_at_step: int | None = None

    @property
    def decay_steps(self) -> int:
        return self.optimizer.decay_steps or self.steps


def load_config(path: str | Path) -> RuntimeConfig:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config {path} is not valid YAML: {e}") from None
    return config_from_dict(data if data is not None else {})


def config_from_dict(data: Any) -> RuntimeConfig:
    if not isinstance(data, dict):
        raise ConfigError("the config must be a mapping")
    data = dict(data)
    model = _model_from(data.pop("model", {}))
    cfg = _build(RuntimeConfig, data, prefix="")
    cfg = dataclasses.replace(cfg, model=model)
    _validate(cfg)
    return cfg


def _model_from(raw: Any) -> ModelConfig:
    if isinstance(raw, str):
        raw = {"preset": raw}
    if not isinstance(raw, dict):
        raise ConfigError("must be a preset name or a mapping", key="model")
    preset = raw.get("preset", "tiny")
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r} (one of {', '.join(PRESETS)})", "model.preset")
    return _build(ModelConfig, {**PRESETS[preset], **raw}, prefix="model.")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key (known: {known})", key=f"{prefix}{key}")
        hint = hints[key]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError("must be a mapping", key=f"{prefix}{key}")
            kwargs[key] = _build(hint, value, prefix=f"{prefix}{key}.")
        else:
            kwargs[key] = _coerce(value, hint, f"{prefix}{key}")
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError("must not be null", key=key)
    for typ in allowed:
        # bool is an int in Python; `steps: true` is a mistake, not 1.
        if typ is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if typ is float and isinstance(value, str):
            try:  # YAML 1.1 reads 3e-4 as a string
                return float(value)
            except ValueError:
                pass
        if typ in (bool, str) and isinstance(value, typ):
            return value
    names = " or ".join(t.__name__ for t in allowed if t is not type(None))
    raise ConfigError(f"must be {names}, got {value!r}", key=key)


def _validate(cfg: RuntimeConfig) -> None:
    m, o, d = cfg.model, cfg.optimizer, cfg.data
    positive = {
        "batch_size": cfg.batch_size, "microbatches": cfg.microbatches, "seq_len": cfg.seq_len,
        "checkpoint_every": cfg.checkpoint_every if isinstance(cfg.checkpoint_every, int) else 1,
        "keep": cfg.keep, "log_every": cfg.log_every, "heartbeat_every_s": cfg.heartbeat_every_s,
        "distributed_timeout_s": cfg.distributed_timeout_s,
        "sigterm_grace_s": cfg.sigterm_grace_s, "model.n_layer": m.n_layer,
        "model.n_head": m.n_head, "model.d_model": m.d_model, "model.d_ff": m.d_ff,
        "model.vocab_size": m.vocab_size, "model.init_std": m.init_std, "optimizer.lr": o.lr,
        "optimizer.grad_clip": o.grad_clip,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"must be > 0, got {value}", key=key)
    if isinstance(cfg.checkpoint_every, str) and cfg.checkpoint_every != "auto":
        raise ConfigError(f"must be a number of steps or 'auto', got {cfg.checkpoint_every!r}",
                          key="checkpoint_every")
    if cfg.preempted_poll_s < 0:
        raise ConfigError(f"must be >= 0, got {cfg.preempted_poll_s}", key="preempted_poll_s")
    if cfg.steps < 0 or o.warmup_steps < 0:
        raise ConfigError("must be >= 0", key="steps" if cfg.steps < 0 else "optimizer.warmup_steps")
    if cfg.heartbeat_every_s > HEARTBEAT_MAX_INTERVAL_S:
        raise ConfigError(f"must be <= {HEARTBEAT_MAX_INTERVAL_S} (the contract's promise to the "
                          "orchestrator)", "heartbeat_every_s")
    if m.d_model % m.n_head:
        raise ConfigError(f"d_model {m.d_model} is not a multiple of n_head {m.n_head}", "model")
    if not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError("must be within [0, 1]", key="optimizer.min_lr_ratio")
    if d.kind not in ("synthetic", "shards"):
        raise ConfigError(f"must be 'synthetic' or 'shards', got {d.kind!r}", key="data.kind")
    if d.kind == "shards" and not d.path:
        raise ConfigError("is required when data.kind is 'shards'", key="data.path")
    if d.dtype not in ("uint16", "uint32"):
        raise ConfigError(f"must be 'uint16' or 'uint32', got {d.dtype!r}", key="data.dtype")
    if d.dtype == "uint16" and d.kind == "shards" and m.vocab_size > 65536:
        raise ConfigError("uint16 tokens cannot address a vocab over 65536", key="data.dtype")
    if cfg.accelerator != "auto":
        try:
            generation(cfg.accelerator)
        except ValueError as e:
            raise ConfigError(str(e), key="accelerator") from None

"""Peak dense bf16 FLOP/s per chip, for MFU. Pure: the runtime cannot import tpujob's catalogue.

Sources: Cloud TPU system-architecture pages (per chip); NVIDIA datasheets, dense (the
datasheets' headline figures assume 2:4 sparsity, twice these): A100 312e12, H100 SXM and
H200 989e12 (the H200 is an H100 with more and faster memory), H100 PCIe 756e12.
Keep in step with tpujob/spec.py's catalogue.
"""

from __future__ import annotations

PEAK_BF16_FLOPS: dict[str, float] = {
    "v2": 45e12,
    "v3": 123e12,
    "v4": 275e12,
    "v5litepod": 197e12,
    "v5p": 459e12,
    "v6e": 918e12,
    "a100": 312e12,
    "h100": 989e12,
    "h100-pcie": 756e12,
    "h200": 989e12,
}

# JAX devices per chip. v2 and v3 chips have two TensorCores and JAX shows each core as a
# device, while the peaks above are per chip; v4 and v5p fuse their two cores (megacore) into
# one device; v5e, v6e and GPUs have one per chip.
DEVICES_PER_CHIP = {"v2": 2, "v3": 2}

# Other spellings of a generation (gcloud's, jax's device_kind) -> the table's key.
_ALIASES = {
    "v5e": "v5litepod",
    "v5lite": "v5litepod",
    "v6": "v6e",
    "trillium": "v6e",
}

# MXU tile edge: model dims should be multiples of it (v6e's MXU is 256x256).
MXU_MULTIPLE = {"v6e": 256}
DEFAULT_MXU_MULTIPLE = 128


def generation(accelerator: str) -> str | None:
    """"v4-8" -> "v4", "v5litepod-16" -> "v5litepod", "cpu" -> None; ValueError if unknown."""
    name = accelerator.strip().lower()
    if name in ("cpu", "none"):
        return None
    if name.startswith("gpu-"):
        name = name[len("gpu-"):]
    head, _, size = name.rpartition("-")
    if head and size.isdigit() and head in PEAK_BF16_FLOPS | _ALIASES:
        name = head
    name = _ALIASES.get(name, name)
    if name not in PEAK_BF16_FLOPS:
        known = ", ".join(sorted(PEAK_BF16_FLOPS) + ["cpu"])
        raise ValueError(f"unknown accelerator {accelerator!r} (known generations: {known})")
    return name


def generation_from_device_kind(device_kind: str) -> str | None:
    """jax's `device.device_kind` ("TPU v4", "TPU v5 lite", "NVIDIA H100 80GB HBM3") -> key."""
    kind = device_kind.lower()
    for gpu in ("h200", "h100", "a100"):  # "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB"
        if gpu in kind:
            return "h100-pcie" if gpu == "h100" and "pcie" in kind else gpu
    if not kind.startswith("tpu"):
        return None
    if "v5 lite" in kind or "v5e" in kind or "v5litepod" in kind:
        return "v5litepod"
    if "v6" in kind:
        return "v6e"
    for gen in ("v5p", "v5", "v4", "v3", "v2"):
        if gen in kind:
            return "v5p" if gen == "v5" else gen
    return None


def peak_flops(gen: str | None) -> float | None:
    return PEAK_BF16_FLOPS.get(gen) if gen else None


def chips(gen: str | None, n_devices: int) -> float:
    """How many chips `n_devices` JAX devices are: the denominator of MFU (peaks are per chip)."""
    return n_devices / DEVICES_PER_CHIP.get(gen or "", 1)


def mfu(flops_per_token: float, tokens_per_s: float, gen: str | None, n_devices: int) -> float | None:
    """Model FLOP/s utilisation against the slice's peak; None where the peak is unknown (cpu)."""
    peak = peak_flops(gen)
    if not peak or not tokens_per_s:
        return None
    return flops_per_token * tokens_per_s / (peak * chips(gen, n_devices))


def mxu_multiple(gen: str | None) -> int:
    return MXU_MULTIPLE.get(gen or "", DEFAULT_MXU_MULTIPLE)

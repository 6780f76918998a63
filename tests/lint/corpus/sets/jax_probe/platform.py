# A JAX package probing for torch_xla does not make its files PyTorch/XLA code.
try:
    import torch_xla  # noqa: F401
    HAS_TORCH_XLA = True
except ImportError:
    HAS_TORCH_XLA = False

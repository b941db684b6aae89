"""Which implementation the kernel entry points run: Triton on CUDA tensors of an Ampere or newer GPU, the torch
reference elsewhere."""

from __future__ import annotations

import functools
import os

import torch

BACKENDS = ("auto", "triton", "torch")
ENV_VAR = "SQLSCOUT_KERNELS"


def _checked(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(
            f"unknown kernel backend {name!r}: choose one of {', '.join(BACKENDS)} (env {ENV_VAR})"
        )
    return name


# The kernels feed bf16 tiles to tensor-core dots, which NVIDIA GPUs have from compute capability 8.0 (Ampere).
MIN_CAPABILITY = (8, 0)

_backend = _checked(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto")


def set_backend(name: str) -> None:
    """Force "triton" or "torch" for every op, or "auto" (Triton on CUDA tensors of an Ampere or newer GPU)."""
    global _backend
    _backend = _checked(name)


def get_backend() -> str:
    return _backend


@functools.lru_cache(maxsize=16)
def _has_bf16_tensor_cores(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= MIN_CAPABILITY


def use_triton(x: torch.Tensor) -> bool:
    """Whether an op on `x` runs the Triton kernel: under "auto", on CUDA tensors of a GPU with bf16 tensor cores
    (older GPUs run the torch reference); forced "triton" on CPU needs TRITON_INTERPRET=1."""
    if _backend == "auto":
        return x.is_cuda and _has_bf16_tensor_cores(x.device.index)
    return _backend == "triton"


def interpreting() -> bool:
    """True when Triton runs through its CPU interpreter (no bf16 arithmetic, no autotuning there)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"

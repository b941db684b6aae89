"""Which implementation the kernel entry points run: Triton on CUDA tensors, the torch reference elsewhere."""

from __future__ import annotations

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


_backend = _checked(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto")


def set_backend(name: str) -> None:
    """Force "triton" or "torch" for every op, or "auto" (Triton exactly when the input is on CUDA)."""
    global _backend
    _backend = _checked(name)


def get_backend() -> str:
    return _backend


def use_triton(x: torch.Tensor) -> bool:
    """Whether an op on `x` runs the Triton kernel (forced "triton" on CPU needs TRITON_INTERPRET=1)."""
    if _backend == "auto":
        return x.is_cuda
    return _backend == "triton"


def interpreting() -> bool:
    """True when Triton runs through its CPU interpreter (no bf16 arithmetic, no autotuning there)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"

"""RMSNorm benchmark: zero-centred norm and fused residual add + norm at hidden 2048."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from benchmarks.kernels.harness import Case, compiled, optional_module
from benchmarks.kernels.shapes import HIDDEN, token_counts
from kernels.ops.rms_norm import rms_norm_triton
from kernels.reference.rms_norm import rms_norm

EPS = 1e-6


def _liger_norm():
    liger = optional_module("liger_kernel.ops.rms_norm")
    if liger is None:
        return None
    # Gemma casting with offset 1 is the zero-centred (1 + w) norm.
    return lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 1.0, "gemma", False)


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    eager_compiled = compiled(rms_norm)
    liger = _liger_norm()
    qwen = optional_module("transformers.models.qwen3_5.modeling_qwen3_5")
    for rows in token_counts(quick):
        x = torch.randn(rows, HIDDEN, device=device, dtype=dtype)
        residual = torch.randn_like(x)
        weight = torch.randn(HIDDEN, device=device, dtype=dtype) * 0.1
        size = x.element_size() * rows * HIDDEN
        impls = {
            "triton": lambda x=x, w=weight: rms_norm_triton(x, w, EPS),
            "torch eager": lambda x=x, w=weight: rms_norm(x, w, EPS),
            "torch.compile": lambda x=x, w=weight: eager_compiled(x, w, EPS),
        }
        if qwen is not None:
            module = qwen.Qwen3_5RMSNorm(HIDDEN, eps=EPS).to(device=device, dtype=dtype)
            impls["transformers"] = lambda x=x, m=module: m(x)
        if liger is not None:
            impls["liger"] = lambda x=x, w=weight: liger(x, w)
        yield Case("rms_norm", f"{rows}x{HIDDEN}", 2 * size, 0, impls)

        fused = {
            "triton fused add+norm": lambda x=x, r=residual, w=weight: rms_norm_triton(x, w, EPS, residual=r),
            "triton add then norm": lambda x=x, r=residual, w=weight: rms_norm_triton(x + r, w, EPS),
            "torch eager": lambda x=x, r=residual, w=weight: rms_norm(x, w, EPS, residual=r),
            "torch.compile": lambda x=x, r=residual, w=weight: eager_compiled(x, w, EPS, residual=r),
        }
        yield Case("rms_norm + residual", f"{rows}x{HIDDEN}", 4 * size, 0, fused)

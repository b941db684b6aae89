"""Gated RMSNorm benchmark: the Gated DeltaNet output norm, 16 heads x 128 per token."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from benchmarks.kernels.harness import Case, compiled
from benchmarks.kernels.shapes import GDN_HEAD_DIM, GDN_HEADS, token_counts
from kernels.ops.gated_rms_norm import gated_rms_norm_triton
from kernels.reference.gated_rms_norm import gated_rms_norm

EPS = 1e-6


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    eager_compiled = compiled(gated_rms_norm)
    for tokens in token_counts(quick):
        rows = tokens * GDN_HEADS
        x = torch.randn(rows, GDN_HEAD_DIM, device=device, dtype=dtype)
        z = torch.randn_like(x)
        weight = torch.ones(GDN_HEAD_DIM, device=device, dtype=dtype)
        impls = {
            "triton": lambda x=x, z=z, w=weight: gated_rms_norm_triton(x, z, w, EPS),
            "torch eager": lambda x=x, z=z, w=weight: gated_rms_norm(x, z, w, EPS),
            "torch.compile": lambda x=x, z=z, w=weight: eager_compiled(x, z, w, EPS),
        }
        yield Case(
            "gated_rms_norm",
            f"{tokens}x{GDN_HEADS}x{GDN_HEAD_DIM}",
            3 * x.numel() * x.element_size(),
            0,
            impls,
        )

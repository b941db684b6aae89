"""Rotary embedding benchmark: the partial (64 of 256 dims) rotation of the 8 query heads."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from benchmarks.kernels.harness import Case, compiled
from benchmarks.kernels.shapes import HEAD_DIM, Q_HEADS, ROPE_THETA, ROTARY_DIM, token_counts
from kernels.ops.rotary import rotary_embedding_triton
from kernels.reference.rotary import rotary_embedding


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    eager_compiled = compiled(rotary_embedding)
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, ROTARY_DIM, 2, device=device).float() / ROTARY_DIM))
    for tokens in token_counts(quick):
        x = torch.randn(1, tokens, Q_HEADS, HEAD_DIM, device=device, dtype=dtype)
        positions = torch.arange(4000, 4000 + tokens, device=device)[None]
        impls = {
            "triton": lambda x=x, p=positions: rotary_embedding_triton(x, p, inv_freq),
            "torch eager": lambda x=x, p=positions: rotary_embedding(x, p, inv_freq),
            "torch.compile": lambda x=x, p=positions: eager_compiled(x, p, inv_freq),
        }
        yield Case("rotary", f"{tokens}x{Q_HEADS}x{HEAD_DIM}", 2 * x.numel() * x.element_size(), 0, impls)

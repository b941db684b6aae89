"""Causal depthwise conv1d benchmark: the Gated DeltaNet input conv (6144 channels, width 4) with its state."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from benchmarks.kernels.harness import Case, compiled
from benchmarks.kernels.shapes import CONV_CHANNELS, CONV_WIDTH, token_counts
from kernels.ops.causal_conv1d import causal_conv1d_triton
from kernels.reference.causal_conv1d import causal_conv1d


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    eager_compiled = compiled(causal_conv1d)
    for tokens in token_counts(quick):
        x = torch.randn(1, tokens, CONV_CHANNELS, device=device, dtype=dtype)
        weight = torch.randn(CONV_CHANNELS, CONV_WIDTH, device=device, dtype=dtype)
        state = torch.zeros(1, CONV_CHANNELS, CONV_WIDTH - 1, device=device, dtype=dtype)
        impls = {
            "triton": lambda x=x, w=weight, s=state: causal_conv1d_triton(x, w, s),
            "torch eager": lambda x=x, w=weight, s=state: causal_conv1d(x, w, s),
            "torch.compile": lambda x=x, w=weight, s=state: eager_compiled(x, w, s),
        }
        yield Case("causal_conv1d", f"{tokens}x{CONV_CHANNELS}", 2 * x.numel() * x.element_size(), 0, impls)

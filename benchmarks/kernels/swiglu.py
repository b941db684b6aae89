"""SwiGLU benchmark: silu(gate) * up at the MLP width 6144, reading the halves of the fused projection."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from benchmarks.kernels.harness import Case, compiled, optional_module
from benchmarks.kernels.shapes import INTERMEDIATE, token_counts
from kernels.ops.swiglu import swiglu_triton
from kernels.reference.swiglu import swiglu


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    eager_compiled = compiled(swiglu)
    liger = optional_module("liger_kernel.ops.swiglu")
    for tokens in token_counts(quick):
        gate, up = torch.randn(tokens, 2 * INTERMEDIATE, device=device, dtype=dtype).chunk(2, dim=-1)
        impls = {
            "triton": lambda g=gate, u=up: swiglu_triton(g, u),
            "torch eager": lambda g=gate, u=up: swiglu(g, u),
            "torch.compile": lambda g=gate, u=up: eager_compiled(g, u),
        }
        if liger is not None:
            impls["liger"] = lambda g=gate, u=up: liger.LigerSiLUMulFunction.apply(g, u)
        yield Case("swiglu", f"{tokens}x{INTERMEDIATE}", 3 * gate.numel() * gate.element_size(), 0, impls)

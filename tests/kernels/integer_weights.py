"""Random int8 and int4 weights in the integer products' layout, for the product tests."""

from __future__ import annotations

import torch

from kernels.reference import weight_products as layout


def random_integer_weights(kind: str, n: int, k: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(rows, scales) for int8, (rows, scales, minimums) for int4, with K padded to whole chunks: the arguments
    int8_linear and int4_linear take after x."""
    if kind == "int8":
        values = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=generator)
    else:
        values = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=generator)
    blocked = layout.block_values(values)
    blocks = blocked.shape[1] // layout.BLOCK
    scales = (torch.rand(n, blocks, generator=generator) * 0.01).half()
    if kind == "int8":
        return blocked, scales
    minimums = (torch.randn(n, blocks, generator=generator) * 0.05).half()
    return layout.pack_int4(blocked), scales, minimums


def dequantized(kind: str, parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The padded fp32 matrix of random_integer_weights' parts."""
    return layout.dequantize_int8(*parts) if kind == "int8" else layout.dequantize_int4(*parts)

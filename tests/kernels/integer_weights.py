"""Random int8, int4 and int6 weights in the integer products' layout, for the product tests."""

from __future__ import annotations

import torch

from kernels.reference import weight_products as layout
from model.cpu_weights import AFFINE_KINDS, QUANTIZED_KINDS

INTEGER_KINDS = QUANTIZED_KINDS


def random_integer_weights(kind: str, n: int, k: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """The arguments the kind's product takes after x, with K padded to whole chunks: (rows, scales) for int8,
    (rows, bits, K) for int4 and int6 (K for the reference only)."""
    if kind == "int8":
        blocked = layout.block_values(torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=generator))
        scales = (torch.rand(n, blocked.shape[1] // layout.BLOCK, generator=generator) * 0.01).half()
        return blocked, scales
    bits = AFFINE_KINDS[kind]
    blocked = layout.block_values(torch.randint(0, 2**bits, (n, k), dtype=torch.uint8, generator=generator))
    blocks, chunks = blocked.shape[1] // layout.BLOCK, blocked.shape[1] // layout.CHUNK
    scales = torch.randint(0, 256, (n, blocks), dtype=torch.uint8, generator=generator)
    minimums = torch.randint(-127, 128, (n, blocks), dtype=torch.int8, generator=generator)
    steps = torch.randn(n, chunks, layout.STEPS, generator=generator) * torch.tensor([1e-4, 5e-4, 0.05])
    rows = layout.interleave_affine(layout.pack_affine(blocked, bits), scales, minimums, steps, bits)
    return rows, bits, blocked.shape[1]


def dequantized(kind: str, parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The padded fp32 matrix of random_integer_weights' parts."""
    if kind == "int8":
        return layout.dequantize_int8(*parts)
    return layout.dequantize_affine(*parts)


def run_integer_product(
    ops, kind: str, x: torch.Tensor, parts: tuple[torch.Tensor, ...], out: torch.Tensor
) -> None:
    """The kind's product of x (padded to the weights' width) into out."""
    if kind == "int8":
        ops.int8_linear.out(x, *parts, out)
    else:
        ops.affine_linear.out(x, *parts[:2], out)

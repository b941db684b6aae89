"""Int8 weight-only quantization: per-output-channel symmetric scales, computed once at load.

A decode step reads every weight once per token, so on a CPU its time is the bytes of the weights: int8
halves bf16's. The matrix-vector products run on torch's int8 x bf16 kernel (activations stay bf16, whatever
the model dtype); a prefill of many tokens dequantizes a block of rows at a time into the model dtype and
multiplies densely, as the int8 kernel re-reads the weights for every few rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

QUANTIZE_CHOICES = ("int8",)
INT8_MAX = 127
# Inputs of up to this many rows take the int8 kernel; more rows (prefill) are multiplied densely.
KERNEL_MAX_ROWS = 32
# torch's int8 kernel gives wrong sums when the inner dimension is not a whole number of 16-wide vectors.
KERNEL_K_MULTIPLE = 16
# Rows dequantized at once by the dense path (8 MB of fp32 at hidden size 2048), and by quantize_int8.
DEQUANTIZE_BLOCK_ROWS = 1024
QUANTIZE_BLOCK_ROWS = 8192


@dataclass(frozen=True)
class Int8Weight:
    """A [N, K] weight as int8 values and one scale per output row: weight ~= values * scales[:, None]."""

    values: torch.Tensor  # int8 [N, K]
    scales: torch.Tensor  # bf16 [N], the dtype torch's int8 kernel takes with bf16 activations

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.scales.nbytes

    def dequantize(self, dtype: torch.dtype, rows: slice = slice(None)) -> torch.Tensor:
        """The weight's rows in dtype."""
        return self.values[rows].to(dtype).mul_(self.scales[rows, None].to(dtype))


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """Symmetric per-row int8 of a [N, K] weight, its largest magnitude per row mapped to 127.

    Scales are rounded to bf16 before the values are computed, so the values fit the scale the kernel uses.
    """
    rows = weight.shape[0]
    values = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scales = torch.empty(rows, dtype=torch.bfloat16, device=weight.device)
    for begin in range(0, rows, QUANTIZE_BLOCK_ROWS):
        block = weight[begin : begin + QUANTIZE_BLOCK_ROWS].to(torch.float32, copy=True)
        scale = (block.abs().amax(dim=1) / INT8_MAX).clamp_min(torch.finfo(torch.bfloat16).tiny)
        scales[begin : begin + QUANTIZE_BLOCK_ROWS] = scale
        scale = scales[begin : begin + QUANTIZE_BLOCK_ROWS].float()
        values[begin : begin + QUANTIZE_BLOCK_ROWS] = (
            block.div_(scale[:, None]).round_().clamp_(-INT8_MAX, INT8_MAX)
        )
    return Int8Weight(values, scales)


def int8_linear(x: torch.Tensor, weight: Int8Weight) -> torch.Tensor:
    """x @ weight.T, in x's dtype."""
    out_features, in_features = weight.shape
    rows = x.numel() // in_features
    if rows <= KERNEL_MAX_ROWS and in_features % KERNEL_K_MULTIPLE == 0:
        flat = x.reshape(rows, in_features).to(torch.bfloat16)
        out = torch.ops.aten._weight_int8pack_mm(flat, weight.values, weight.scales)
        return out.view(*x.shape[:-1], out_features).to(x.dtype)
    # Blocks of rows keep each dequantized piece small enough to be reused by the allocator.
    blocks = [
        F.linear(x, weight.dequantize(x.dtype, slice(begin, begin + DEQUANTIZE_BLOCK_ROWS)))
        for begin in range(0, out_features, DEQUANTIZE_BLOCK_ROWS)
    ]
    return torch.cat(blocks, dim=-1)

"""Weight quantization of a [N, K] matrix, once at load, per block of 32 values of a row (the block of the integer
products, kernels/cpu): int8 with one scale per block (the format of llama.cpp's Q8_0), int4 with a scale and a
minimum per block fitted by least squares (Q4_1's format, with a better fit). K is padded with zeros to whole
blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.reference.weight_products import BLOCK, INT8_MAX, padded

INT4_LEVELS = 15
# Rows quantized at once: bounds the fp32 working copies at about 100 MB for a 2,048-wide matrix.
BLOCK_ROWS = 8192
# Refits of each block's scale and minimum to its rounded values (each lowers the squared error or keeps it).
INT4_REFITS = 4


def _blocks(weight: torch.Tensor, begin: int) -> torch.Tensor:
    """Rows begin .. begin + BLOCK_ROWS of weight in fp32, padded with zeros to whole blocks: [rows, blocks, BLOCK]."""
    rows = weight[begin : begin + BLOCK_ROWS].float()
    return F.pad(rows, (0, -rows.shape[1] % BLOCK)).view(rows.shape[0], -1, BLOCK)


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values int8 [N, K'], scales fp16 [N, K' / BLOCK]) with K' = K rounded up to BLOCK (zeros): symmetric per
    block of a row, its largest magnitude mapped to 127.

    Scales are rounded to fp16 before the values are computed, so the values fit the scale the products use.
    """
    rows, columns = weight.shape
    width = padded(columns, BLOCK)
    values = torch.empty(rows, width, dtype=torch.int8, device=weight.device)
    scales = torch.empty(rows, width // BLOCK, dtype=torch.float16, device=weight.device)
    for begin in range(0, rows, BLOCK_ROWS):
        block = _blocks(weight, begin)
        scale = (block.abs().amax(dim=-1) / INT8_MAX).clamp_min(torch.finfo(torch.float16).tiny)
        scales[begin : begin + BLOCK_ROWS] = scale
        scale = scales[begin : begin + BLOCK_ROWS].float()
        quantized = block.div_(scale[..., None]).round_().clamp_(-INT8_MAX, INT8_MAX)
        values[begin : begin + BLOCK_ROWS] = quantized.view(block.shape[0], width)
    return values, scales


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values uint8 [N, K'] in [0, 15], scales fp16 [N, K' / BLOCK], minimums fp16 [N, K' / BLOCK]) with
    K' = K rounded up to BLOCK (zeros) and weight ~= scale * value + minimum per block.

    Each block starts from its range (min to max in 15 steps), then its scale and minimum are refitted by least
    squares to the rounded values and the values rounded again, keeping the best fit seen; scale and minimum are
    rounded to fp16 before the values are computed from them.
    """
    rows, columns = weight.shape
    width = padded(columns, BLOCK)
    values = torch.empty(rows, width, dtype=torch.uint8, device=weight.device)
    scales = torch.empty(rows, width // BLOCK, dtype=torch.float16, device=weight.device)
    minimums = torch.empty_like(scales)
    for begin in range(0, rows, BLOCK_ROWS):
        q, scale, minimum = _fit_int4(_blocks(weight, begin))
        values[begin : begin + BLOCK_ROWS] = q.view(-1, width)
        scales[begin : begin + BLOCK_ROWS] = scale
        minimums[begin : begin + BLOCK_ROWS] = minimum
    return values, scales, minimums


def _round_to(w: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor):
    """fp16 scale and minimum, and the values they give w, with their squared error per block."""
    scale, minimum = scale.half(), minimum.half()
    step = scale.float().clamp_min(torch.finfo(torch.float16).tiny)
    q = ((w - minimum.float()[..., None]) / step[..., None]).round_().clamp_(0, INT4_LEVELS)
    error = (q * scale.float()[..., None] + minimum.float()[..., None] - w).square_().sum(-1)
    return q, scale, minimum, error


def _fit_int4(w: torch.Tensor):
    low, high = w.amin(-1), w.amax(-1)
    best_q, best_scale, best_minimum, best_error = _round_to(w, (high - low) / INT4_LEVELS, low)
    q = best_q
    count = w.shape[-1]
    for _ in range(INT4_REFITS):
        # Least squares of w ~ scale * q + minimum over each block, q fixed.
        sum_q, sum_w = q.sum(-1), w.sum(-1)
        sum_qq, sum_qw = q.square().sum(-1), (q * w).sum(-1)
        determinant = count * sum_qq - sum_q * sum_q
        solvable = determinant > 0
        safe = torch.where(solvable, determinant, torch.ones_like(determinant))
        scale = torch.where(solvable, (count * sum_qw - sum_q * sum_w) / safe, best_scale.float())
        minimum = torch.where(solvable, (sum_w - scale * sum_q) / count, best_minimum.float())
        q, scale, minimum, error = _round_to(w, scale.clamp_min(0), minimum)
        better = error < best_error
        best_q = torch.where(better[..., None], q, best_q)
        best_scale = torch.where(better, scale, best_scale)
        best_minimum = torch.where(better, minimum, best_minimum)
        best_error = torch.minimum(error, best_error)
    return best_q.to(torch.uint8), best_scale, best_minimum

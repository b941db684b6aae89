"""Weight quantization of a [N, K] matrix, once at load, per block of 32 values of a row (the block of the integer
products, kernels/cpu): int8 with one scale per block (the format of llama.cpp's Q8_0), and 4- or 6-bit values with
a scale and a minimum per block, kept as 8-bit multiples of steps per chunk of 512 values (the layout of
kernels/reference/weight_products.py; llama.cpp's Q4_K and Q6_K keep their block scales the same way). K is padded
with zeros to whole blocks (int8) or chunks (affine)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from kernels.reference.weight_products import AFFINE_BITS, BLOCK, CHUNK, INT8_MAX, padded

# Values quantized at once (whole rows): the fit makes dozens of elementwise passes over its fp32 working copies,
# which run several times faster from the cache (1 MB each) than from memory (about 5x for 4-bit weights).
GROUP_VALUES = 1 << 18
# Refits of each block's scale and minimum to its rounded values (each lowers the squared error or keeps it).
REFITS = 3
# The starting points of a block's fit: its range in levels + d steps, for each d. Starting a little off the range
# lets a block trade its extremes for a finer step (the squared error falls about 4% on Gaussian weights against
# the range alone); each start costs a fit.
RANGE_OFFSETS = (0.0, 0.5, 1.0)
SCALE_MULTIPLES = 255  # a block's scale: 0 .. 255 times its chunk's scale step
MINIMUM_MULTIPLES = 127  # a block's minimum: -127 .. 127 times its chunk's minimum step


def _groups(weight: torch.Tensor, multiple: int):
    """(begin, end, rows) for each group of about GROUP_VALUES values of weight's rows, in fp32, padded with zeros
    to a multiple of `multiple`: rows is [end - begin, blocks, BLOCK]."""
    count = max(1, GROUP_VALUES // weight.shape[1])
    for begin in range(0, weight.shape[0], count):
        rows = weight[begin : begin + count].float()
        yield (
            begin,
            begin + rows.shape[0],
            F.pad(rows, (0, -rows.shape[1] % multiple)).view(rows.shape[0], -1, BLOCK),
        )


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values int8 [N, K'], scales fp16 [N, K' / BLOCK]) with K' = K rounded up to BLOCK (zeros): symmetric per
    block of a row, its largest magnitude mapped to 127.

    Scales are rounded to fp16 before the values are computed, so the values fit the scale the products use.
    """
    rows, columns = weight.shape
    width = padded(columns, BLOCK)
    values = torch.empty(rows, width, dtype=torch.int8, device=weight.device)
    scales = torch.empty(rows, width // BLOCK, dtype=torch.float16, device=weight.device)
    for begin, end, block in _groups(weight, BLOCK):
        scale = (block.abs().amax(dim=-1) / INT8_MAX).clamp_min(torch.finfo(torch.float16).tiny)
        scales[begin:end] = scale
        scale = scales[begin:end].float()
        quantized = block.div_(scale[..., None]).round_().clamp_(-INT8_MAX, INT8_MAX)
        values[begin:end] = quantized.view(end - begin, width)
    return values, scales


def quantize_affine(
    weight: torch.Tensor, bits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values uint8 [N, K'] in [0, 2^bits - 1], scales uint8 and minimums int8 [N, K' / BLOCK], steps fp32
    [N, K' / CHUNK, 3]) with K' = K rounded up to CHUNK (zeros) and, per block, weight ~= scale * value + minimum
    where scale = steps[0] * scales and minimum = steps[1] * minimums + steps[2] of the block's chunk.

    Each block is fitted in fp32 first, from a few starts near its range, by least squares of the scale and minimum
    to the rounded values (keeping the best fit seen); then a chunk's scale step is its largest scale over 255 and
    its minimums span -127 .. 127 steps around their middle, and the block's scale and minimum are refitted on those
    grids. (A minimum step of the largest magnitude over 127 cost 6-bit weights 4% in error, this grid 1%.)
    """
    if bits not in AFFINE_BITS:
        raise ValueError(f"affine quantization takes {AFFINE_BITS} bits, not {bits}")
    levels = 2**bits - 1
    rows, columns = weight.shape
    width = padded(columns, CHUNK)
    values = torch.empty(rows, width, dtype=torch.uint8, device=weight.device)
    scales = torch.empty(rows, width // BLOCK, dtype=torch.uint8, device=weight.device)
    minimums = torch.empty(rows, width // BLOCK, dtype=torch.int8, device=weight.device)
    steps = torch.empty(rows, width // CHUNK, 3, dtype=torch.float32, device=weight.device)
    used = padded(columns, BLOCK) // BLOCK  # blocks holding any of the weight; the rest are zeros
    for begin, end, blocks in _groups(weight, CHUNK):
        w = blocks.view(-1, width // CHUNK, CHUNK // BLOCK, BLOCK)
        # A block of zeros fits with scale 0 and minimum 0: only the blocks in use are fitted.
        _, scale, minimum, _ = _best_fit(blocks[:, :used], levels)
        scale, minimum = (
            F.pad(fit, (0, width // BLOCK - used)).view(w.shape[:-1]) for fit in (scale, minimum)
        )
        low, high = minimum.amin(-1), minimum.amax(-1)
        tiny = torch.finfo(torch.float32).tiny
        step = torch.stack(
            (
                (scale.amax(-1) / SCALE_MULTIPLES).clamp_min(tiny),
                ((high - low) / (2 * MINIMUM_MULTIPLES)).clamp_min(tiny),
                (high + low) / 2,
            ),
            -1,
        )
        on_grid = functools.partial(_on_grid, step=step)
        q, scale, minimum, _ = _refit(w, levels, *_rounded(w, levels, *on_grid(scale, minimum)), on_grid)
        values[begin:end] = q.view(-1, width)
        scale, minimum = _multiples(scale, minimum, step)
        scales[begin:end] = scale.view(-1, width // BLOCK).to(torch.uint8)
        minimums[begin:end] = minimum.view(-1, width // BLOCK).to(torch.int8)
        steps[begin:end] = step
    return values, scales, minimums, steps


def _multiples(scale: torch.Tensor, minimum: torch.Tensor, step: torch.Tensor):
    """A block's scale and minimum as the nearest multiples of its chunk's steps (step: scale step, minimum step,
    minimum base), as floats."""
    scale = (scale / step[..., :1]).round_().clamp_(0, SCALE_MULTIPLES)
    minimum = (minimum - step[..., 2:]) / step[..., 1:2]
    return scale, minimum.round_().clamp_(-MINIMUM_MULTIPLES, MINIMUM_MULTIPLES)


def _on_grid(scale: torch.Tensor, minimum: torch.Tensor, step: torch.Tensor):
    """A block's scale and minimum rounded to its chunk's grids."""
    scale, minimum = _multiples(scale, minimum, step)
    return scale * step[..., :1], minimum * step[..., 1:2] + step[..., 2:]


def _rounded(w: torch.Tensor, levels: int, scale: torch.Tensor, minimum: torch.Tensor):
    """(values, scale, minimum, squared error per block): w's values for this scale and minimum."""
    step = scale.clamp_min(torch.finfo(torch.float32).tiny)
    q = ((w - minimum[..., None]) / step[..., None]).round_().clamp_(0, levels)
    error = (q * scale[..., None] + minimum[..., None] - w).square_().sum(-1)
    return q, scale, minimum, error


def _least_squares(w: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor):
    """The scale and minimum of w ~= scale * q + minimum over each block, q fixed (kept where q is constant)."""
    count = w.shape[-1]
    sum_q, sum_w = q.sum(-1), w.sum(-1)
    sum_qq, sum_qw = q.square().sum(-1), (q * w).sum(-1)
    determinant = count * sum_qq - sum_q * sum_q
    solvable = determinant > 0
    safe = torch.where(solvable, determinant, torch.ones_like(determinant))
    fitted = torch.where(solvable, (count * sum_qw - sum_q * sum_w) / safe, scale).clamp_min(0)
    return fitted, torch.where(solvable, (sum_w - fitted * sum_q) / count, minimum)


def _keep_better(best, candidate):
    better = candidate[3] < best[3]
    return (
        torch.where(better[..., None], candidate[0], best[0]),
        torch.where(better, candidate[1], best[1]),
        torch.where(better, candidate[2], best[2]),
        torch.minimum(candidate[3], best[3]),
    )


def _refit(w, levels, q, scale, minimum, error, on_grid=lambda scale, minimum: (scale, minimum)):
    """The best of REFITS least-squares refits (each put on_grid) of a block's scale and minimum to its values."""
    best = (q, scale, minimum, error)
    for _ in range(REFITS):
        best = _keep_better(
            best, _rounded(w, levels, *on_grid(*_least_squares(w, best[0], best[1], best[2])))
        )
    return best


def _best_fit(w: torch.Tensor, levels: int):
    low, high = w.amin(-1), w.amax(-1)
    best = None
    for offset in RANGE_OFFSETS:
        fit = _refit(w, levels, *_rounded(w, levels, (high - low) / (levels + offset), low))
        best = fit if best is None else _keep_better(best, fit)
    return best

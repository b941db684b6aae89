"""Partial rotary embedding in Triton (rotate_half style): one program per (token, head)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import check_last_dim_contiguous
from kernels.ops import launch

# 2*pi split in three (Cody-Waite): k * TWO_PI_HIGH is exact in fp32 for k < 2**16, i.e. angles below ~4e5.
TWO_PI_HIGH = tl.constexpr(6.28125)
TWO_PI_MID = tl.constexpr(0.0019353071693331003)
TWO_PI_LOW = tl.constexpr(1.0253131677018246e-11)


@triton.jit
def _reduced_angle(angle):
    """angle minus the nearest multiple of 2*pi, so GPU sin/cos only ever see arguments in [-pi, pi]."""
    turns = tl.floor(angle * 0.15915494309189535 + 0.5)
    return ((angle - turns * TWO_PI_HIGH) - turns * TWO_PI_MID) - turns * TWO_PI_LOW


@triton.jit
def _rotary_kernel(
    x_ptr,
    positions_ptr,
    inv_freq_ptr,
    out_ptr,
    seq_len,
    n_heads,
    head_dim,
    stride_xb,
    stride_xt,
    stride_xh,
    stride_pb,
    stride_pt,
    HALF: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    b = token // seq_len
    t = token % seq_len
    x_row = x_ptr + b.to(tl.int64) * stride_xb + t.to(tl.int64) * stride_xt + head.to(tl.int64) * stride_xh
    out_row = out_ptr + (token.to(tl.int64) * n_heads + head) * head_dim
    d = tl.arange(0, BLOCK_D)
    in_row = d < head_dim
    rotated = d < 2 * HALF
    first_half = d < HALF
    x = tl.load(x_row + d, mask=in_row, other=0.0).to(tl.float32)
    partner = tl.where(first_half, d + HALF, d - HALF)
    x_partner = tl.load(x_row + partner, mask=rotated, other=0.0).to(tl.float32)
    position = tl.load(positions_ptr + b * stride_pb + t * stride_pt).to(tl.float32)
    # The product rounds exactly as the reference's fp32 positions * inv_freq does; only then reduce it.
    angle = _reduced_angle(
        position * tl.load(inv_freq_ptr + d % HALF, mask=rotated, other=0.0).to(tl.float32)
    )
    sign = tl.where(first_half, -1.0, 1.0)
    y = tl.where(rotated, x * tl.cos(angle) + sign * x_partner * tl.sin(angle), x)
    tl.store(out_row + d, y.to(out_ptr.dtype.element_ty), mask=in_row)


def rotary_embedding_triton(
    x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Launch the rotary embedding of x [B, T, H, D] (any strides, unit last stride) at positions [B, T]."""
    check_last_dim_contiguous(x=x)
    batch, seq_len, n_heads, head_dim = x.shape
    out = launch.output_like(x, out)
    inv_freq = inv_freq.to(device=x.device, dtype=torch.float32).contiguous()
    if x.numel():
        launch.run(
            _rotary_kernel,
            (batch * seq_len, n_heads),
            (x, positions, inv_freq, out, seq_len, n_heads, head_dim, *x.stride()[:3], *positions.stride()),
            {"HALF": inv_freq.shape[0]},
            launch.rotary_config(head_dim),
        )
    return out

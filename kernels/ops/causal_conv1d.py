"""Causal depthwise conv1d + SiLU in Triton, reading the previous inputs from a rolling state it then updates."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import check_last_dim_contiguous
from kernels.ops import launch


@triton.jit
def _causal_conv1d_kernel(
    x_ptr,
    weight_ptr,
    state_ptr,
    out_ptr,
    seq_len,
    channels,
    stride_xb,
    stride_xt,
    stride_sb,
    stride_sc,
    stride_ss,
    WIDTH: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    offs_t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    t_mask = offs_t < seq_len
    c_mask = offs_c < channels
    acc = tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32)
    for j in tl.static_range(WIDTH):
        # Input index of tap j; a negative index falls in the state, which holds the WIDTH-1 earlier inputs.
        src = offs_t - (WIDTH - 1) + j
        in_x = (src >= 0) & t_mask
        in_state = (src < 0) & t_mask
        x = tl.load(
            x_ptr + b * stride_xb + src[:, None] * stride_xt + offs_c[None, :],
            mask=in_x[:, None] & c_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        s = tl.load(
            state_ptr + b * stride_sb + offs_c[None, :] * stride_sc + (WIDTH - 1 + src)[:, None] * stride_ss,
            mask=in_state[:, None] & c_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        w = tl.load(weight_ptr + offs_c * WIDTH + j, mask=c_mask, other=0.0).to(tl.float32)
        acc += (x + s) * w[None, :]
    out = acc * tl.sigmoid(acc)
    o_offsets = (b * seq_len + offs_t[:, None]) * channels + offs_c[None, :]
    tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty), mask=t_mask[:, None] & c_mask[None, :])


@triton.jit
def _conv_state_update_kernel(
    x_ptr,
    state_ptr,
    seq_len,
    channels,
    stride_xb,
    stride_xt,
    stride_sb,
    stride_sc,
    stride_ss,
    HISTORY: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_h = tl.arange(0, BLOCK_H)
    c_mask = offs_c < channels
    h_mask = offs_h < HISTORY
    # New slot h holds input seq_len - HISTORY + h of [old state | x]; it is in the old state when negative.
    src = seq_len - HISTORY + offs_h
    in_x = (src >= 0) & h_mask
    in_state = (src < 0) & h_mask
    state_rows = state_ptr + b * stride_sb + offs_c[:, None] * stride_sc
    x = tl.load(
        x_ptr + b * stride_xb + src[None, :] * stride_xt + offs_c[:, None],
        mask=in_x[None, :] & c_mask[:, None],
        other=0.0,
    )
    old = tl.load(
        state_rows + (seq_len + offs_h)[None, :] * stride_ss, mask=in_state[None, :] & c_mask[:, None]
    )
    # Every old value must be read before any slot is overwritten (a short update shifts the state in place).
    tl.debug_barrier()
    new = tl.where(in_x[None, :], x.to(state_ptr.dtype.element_ty), old)
    tl.store(state_rows + offs_h[None, :] * stride_ss, new, mask=h_mask[None, :] & c_mask[:, None])


@triton.jit
def _conv_trail_kernel(
    x_ptr,
    state_ptr,
    trail_ptr,
    seq_len,
    channels,
    stride_xb,
    stride_xt,
    stride_sb,
    stride_sc,
    stride_ss,
    HISTORY: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """The state after token t, for every t: slot h holds input t + 1 + h of [old state | x]."""
    b = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1)
    offs_c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_h = tl.arange(0, BLOCK_H)
    c_mask = offs_c < channels
    h_mask = offs_h < HISTORY
    src = t + 1 + offs_h  # in [old state | x]: below HISTORY it is an old slot
    in_x = (src >= HISTORY) & h_mask
    in_state = (src < HISTORY) & h_mask
    x = tl.load(
        x_ptr + b * stride_xb + (src - HISTORY)[None, :] * stride_xt + offs_c[:, None],
        mask=in_x[None, :] & c_mask[:, None],
        other=0.0,
    )
    old = tl.load(
        state_ptr + b * stride_sb + offs_c[:, None] * stride_sc + src[None, :] * stride_ss,
        mask=in_state[None, :] & c_mask[:, None],
    )
    new = tl.where(in_x[None, :], x.to(trail_ptr.dtype.element_ty), old)
    rows = trail_ptr + ((b * seq_len + t) * channels + offs_c[:, None]) * HISTORY + offs_h[None, :]
    tl.store(rows, new, mask=h_mask[None, :] & c_mask[:, None])


def causal_conv1d_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_state: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    trail: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch silu(causal depthwise conv) of x [B, T, C] with weight [C, K]; conv_state [B, C, K-1] in place, and
    the state after each token written to trail [B, T, C, K-1] when given."""
    check_last_dim_contiguous(x=x)
    if trail is not None and not trail.is_contiguous():
        raise ValueError("trail [B, T, C, K-1] must be contiguous")
    if not weight.is_contiguous():
        raise ValueError("weight [C, K] must be contiguous")
    batch, seq_len, channels = x.shape
    width = weight.shape[1]
    out = launch.output_like(x, out)
    if not x.numel():
        return out
    strides = (x.stride(0), x.stride(1), *conv_state.stride())
    config = launch.conv_config()
    launch.run(
        _causal_conv1d_kernel,
        (
            batch,
            triton.cdiv(seq_len, config.kwargs["BLOCK_T"]),
            triton.cdiv(channels, config.kwargs["BLOCK_C"]),
        ),
        (x, weight, conv_state, out, seq_len, channels, *strides),
        {"WIDTH": width},
        config,
    )
    if width > 1:
        config = launch.conv_state_config()
        history = {"HISTORY": width - 1, "BLOCK_H": triton.next_power_of_2(width - 1)}
        if trail is not None:  # before the update below overwrites the old state
            launch.run(
                _conv_trail_kernel,
                (batch, seq_len, triton.cdiv(channels, config.kwargs["BLOCK_C"])),
                (x, conv_state, trail, seq_len, channels, *strides),
                history,
                config,
            )
        launch.run(
            _conv_state_update_kernel,
            (batch, triton.cdiv(channels, config.kwargs["BLOCK_C"])),
            (x, conv_state, seq_len, channels, *strides),
            history,
            config,
        )
    return out

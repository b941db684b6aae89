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
def _state_after(
    x_ptr, state_ptr, b, end, offs_c, c_mask, stride_xb, stride_xt, stride_sb, stride_sc, stride_ss,
    HISTORY: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    """The conv state [BLOCK_C, BLOCK_H] after the first `end` tokens of x: slot h holds input end - HISTORY + h of
    x, or slot end + h of the old state where that is negative."""
    offs_h = tl.arange(0, BLOCK_H)
    h_mask = offs_h < HISTORY
    src = end - HISTORY + offs_h
    in_x = (src >= 0) & h_mask
    x = tl.load(
        x_ptr + b * stride_xb + src[None, :] * stride_xt + offs_c[:, None],
        mask=in_x[None, :] & c_mask[:, None],
        other=0.0,
    )
    old = tl.load(
        state_ptr + b * stride_sb + offs_c[:, None] * stride_sc + (end + offs_h)[None, :] * stride_ss,
        mask=((src < 0) & h_mask)[None, :] & c_mask[:, None],
    )
    return tl.where(in_x[None, :], x.to(state_ptr.dtype.element_ty), old)


@triton.jit
def _conv_state_update_kernel(
    x_ptr, state_ptr, seq_len, channels, stride_xb, stride_xt, stride_sb, stride_sc, stride_ss,
    HISTORY: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = offs_c < channels
    new = _state_after(
        x_ptr, state_ptr, b, seq_len, offs_c, c_mask, stride_xb, stride_xt, stride_sb, stride_sc, stride_ss,
        HISTORY, BLOCK_H,
    )  # fmt: skip
    # Every old value must be read before any slot is overwritten (a short update shifts the state in place).
    tl.debug_barrier()
    offs_h = tl.arange(0, BLOCK_H)
    state_rows = state_ptr + b * stride_sb + offs_c[:, None] * stride_sc
    tl.store(
        state_rows + offs_h[None, :] * stride_ss, new, mask=(offs_h < HISTORY)[None, :] & c_mask[:, None]
    )


@triton.jit
def _conv_trail_kernel(
    x_ptr, state_ptr, trail_ptr, seq_len, channels, stride_xb, stride_xt, stride_sb, stride_sc, stride_ss,
    HISTORY: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """The state after each token t, into trail [B, T, C, HISTORY]."""
    b = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1)
    offs_c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = offs_c < channels
    new = _state_after(
        x_ptr, state_ptr, b, t + 1, offs_c, c_mask, stride_xb, stride_xt, stride_sb, stride_sc, stride_ss,
        HISTORY, BLOCK_H,
    )  # fmt: skip
    offs_h = tl.arange(0, BLOCK_H)
    rows = trail_ptr + ((b * seq_len + t) * channels + offs_c[:, None]) * HISTORY + offs_h[None, :]
    tl.store(rows, new.to(trail_ptr.dtype.element_ty), mask=(offs_h < HISTORY)[None, :] & c_mask[:, None])


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

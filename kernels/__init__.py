"""Kernel entry points of the Qwen3.5 forward pass: Triton on CUDA tensors; on the CPU, the fused C++ steps of a
decode token (kernels/cpu) for attention and the gated delta rule, the torch reference for the rest.

Force either with `set_backend("triton" | "torch" | "auto")` or the environment variable SQLSCOUT_KERNELS.
"""

from __future__ import annotations

import torch

from kernels import cpu as cpu_kernels
from kernels import reference
from kernels.backend import get_backend, set_backend, use_triton
from kernels.checks import (
    check_float,
    check_ndim,
    check_same_device,
    check_shape,
)
from kernels.reference import attention as _attention_ref
from kernels.reference import causal_conv1d as _conv_ref
from kernels.reference import gated_delta_rule as _gdn_ref
from kernels.reference import gated_rms_norm as _gated_norm_ref
from kernels.reference import rms_norm as _norm_ref
from kernels.reference import rotary as _rotary_ref
from kernels.reference import swiglu as _swiglu_ref

__all__ = [
    "attention",
    "causal_conv1d",
    "gated_delta_rule",
    "gated_rms_norm",
    "get_backend",
    "reference",
    "rms_norm",
    "rotary_embedding",
    "set_backend",
    "swiglu",
]


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    zero_centered: bool = True,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of the last dim, * (1 + w) when zero_centered else * w; with residual returns (norm(x + r), x + r)."""
    check_float("x", x)
    check_shape("weight", weight, (x.shape[-1],), "[hidden]")
    if residual is not None:
        check_shape("residual", residual, tuple(x.shape), "x.shape")
    if use_triton(x):
        from kernels.ops.rms_norm import rms_norm_triton

        return rms_norm_triton(x, weight, eps, zero_centered=zero_centered, residual=residual)
    return _norm_ref.rms_norm(x, weight, eps, zero_centered=zero_centered, residual=residual)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * rmsnorm(x) * silu(z) over the last dim, with a plain weight."""
    check_float("x", x)
    check_shape("z", z, tuple(x.shape), "x.shape")
    check_shape("weight", weight, (x.shape[-1],), "[hidden]")
    if use_triton(x):
        from kernels.ops.gated_rms_norm import gated_rms_norm_triton

        return gated_rms_norm_triton(x, z, weight, eps)
    return _gated_norm_ref.gated_rms_norm(x, z, weight, eps)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up."""
    check_float("gate", gate)
    check_shape("up", up, tuple(gate.shape), "gate.shape")
    if use_triton(gate):
        from kernels.ops.swiglu import swiglu_triton

        return swiglu_triton(gate, up)
    return _swiglu_ref.swiglu(gate, up)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate the first 2 * len(inv_freq) dims of x [B, T, H, D] (rotate_half style) at positions [B, T]."""
    check_float("x", x)
    check_ndim("x", x, 4, "[B, T, H, D]")
    check_shape("positions", positions, tuple(x.shape[:2]), "[B, T]")
    if 2 * inv_freq.shape[0] > x.shape[-1]:
        raise ValueError(
            f"inv_freq has {inv_freq.shape[0]} frequencies, more than head_dim {x.shape[-1]} / 2"
        )
    if use_triton(x):
        from kernels.ops.rotary import rotary_embedding_triton

        return rotary_embedding_triton(x, positions, inv_freq)
    return _rotary_ref.rotary_embedding(x, positions, inv_freq)


def _check_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, gate: torch.Tensor, start: torch.Tensor
) -> None:
    check_float("q", q)
    check_ndim("q", q, 4, "[B, T, Hq, D]")
    batch, _, q_heads, head_dim = q.shape
    check_ndim("k_cache", k_cache, 4, "[B, Hkv, S_max, D]")
    kv_heads, max_len = k_cache.shape[1], k_cache.shape[2]
    check_shape("k_cache", k_cache, (batch, kv_heads, max_len, head_dim), "[B, Hkv, S_max, D]")
    check_shape("v_cache", v_cache, tuple(k_cache.shape), "k_cache.shape")
    check_shape("gate", gate, tuple(q.shape), "q.shape")
    check_shape("start", start, (batch,), "[B]")
    if q_heads % kv_heads:
        raise ValueError(f"query heads ({q_heads}) must be a multiple of KV heads ({kv_heads})")
    if start.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"start must be an integer tensor, got {start.dtype}")
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, gate=gate, start=start)


def attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gate: torch.Tensor,
    start: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal GQA attention of q [B, T, Hq, D] over a cache already holding its keys at [start_b, start_b + T).

    Returns attn * sigmoid(gate) [B, T, Hq, D]; T == 1 runs the split-KV decode kernel, T > 1 the prefill one.
    """
    _check_attention(q, k_cache, v_cache, gate, start)
    if use_triton(q):
        if q.shape[1] == 1:
            from kernels.ops.attention_decode import attention_decode_triton

            return attention_decode_triton(q, k_cache, v_cache, gate, start, scale)
        from kernels.ops.attention_prefill import attention_prefill_triton

        return attention_prefill_triton(q, k_cache, v_cache, gate, start, scale)
    # The fused step reads each position's head a vector of 16 values at a time.
    steppable = q.device.type == "cpu" and q.shape[1] == 1 and q.shape[-1] % 16 == 0
    if steppable and (compiled := cpu_kernels.ops()):
        out = torch.empty_like(q)
        start = start.to(dtype=torch.long).contiguous()
        compiled.attention_step(q.contiguous(), k_cache, v_cache, gate.contiguous(), start, scale, out)
        return out
    return _attention_ref.attention(q, k_cache, v_cache, gate, start, scale)


def causal_conv1d(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, trail: torch.Tensor | None = None
) -> torch.Tensor:
    """silu(causal depthwise conv1d) of x [B, T, C] with weight [C, K]; conv_state [B, C, K-1] updated in place.

    trail [B, T, C, K-1], when given, receives the conv state after each token (a verify pass keeps the one
    after its last accepted token).
    """
    check_float("x", x)
    check_ndim("x", x, 3, "[B, T, C]")
    batch, length, channels = x.shape
    check_ndim("weight", weight, 2, "[C, K]")
    check_shape("weight", weight, (channels, weight.shape[1]), "[C, K]")
    check_shape("conv_state", conv_state, (batch, channels, weight.shape[1] - 1), "[B, C, K-1]")
    if trail is not None:
        check_shape("trail", trail, (batch, length, channels, weight.shape[1] - 1), "[B, T, C, K-1]")
        check_same_device(x=x, trail=trail)
    if use_triton(x):
        from kernels.ops.causal_conv1d import causal_conv1d_triton

        return causal_conv1d_triton(x, weight, conv_state, trail=trail)
    return _conv_ref.causal_conv1d(x, weight, conv_state, trail)


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    trail: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gated delta rule over q, k [B, T, Hk, dk], v [B, T, Hv, dv] from state [B, Hv, dk, dv] (fp32, in place).

    a, b [B, T, Hv] are the raw gate projections; returns o [B, T, Hv, dv] in v.dtype. Chunked when T > 1,
    unless trail [B, T, Hv, dk, dv] (fp32) is given to receive the state after each token: then the token
    recurrence runs, as a verify pass of a few drafted tokens needs.
    """
    check_float("v", v)
    check_ndim("q", q, 4, "[B, T, Hk, dk]")
    batch, length, key_heads, key_dim = q.shape
    check_shape("k", k, tuple(q.shape), "q.shape")
    check_ndim("v", v, 4, "[B, T, Hv, dv]")
    value_heads, value_dim = v.shape[2], v.shape[3]
    check_shape("v", v, (batch, length, value_heads, value_dim), "[B, T, Hv, dv]")
    check_shape("a", a, (batch, length, value_heads), "[B, T, Hv]")
    check_shape("b", b, (batch, length, value_heads), "[B, T, Hv]")
    check_shape("A_log", A_log, (value_heads,), "[Hv]")
    check_shape("dt_bias", dt_bias, (value_heads,), "[Hv]")
    check_shape("state", state, (batch, value_heads, key_dim, value_dim), "[B, Hv, dk, dv]")
    if state.dtype != torch.float32:
        raise TypeError(f"state must be float32, got {state.dtype}")
    if value_heads % key_heads:
        raise ValueError(f"value heads ({value_heads}) must be a multiple of key heads ({key_heads})")
    if trail is not None:
        check_shape("trail", trail, (batch, length, value_heads, key_dim, value_dim), "[B, T, Hv, dk, dv]")
        if trail.dtype != torch.float32:
            raise TypeError(f"trail must be float32, got {trail.dtype}")
        check_same_device(v=v, trail=trail)
    if use_triton(v):
        from kernels.ops.gated_delta_rule import gated_delta_rule_triton

        return gated_delta_rule_triton(q, k, v, a, b, A_log, dt_bias, state, trail=trail)
    # The fused step updates the state in place: a state gathered into a copy takes the reference.
    on_cpu = v.device.type == "cpu" and state.is_contiguous()
    if on_cpu and (length == 1 or trail is not None) and (compiled := cpu_kernels.ops()):
        return _gdn_cpu_steps(compiled, q, k, v, a, b, A_log, dt_bias, state, trail)
    return _gdn_ref.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, state, trail)


def _gdn_cpu_steps(compiled, q, k, v, a, b, A_log, dt_bias, state, trail) -> torch.Tensor:
    """The token recurrence through the fused C++ step, a token at a time (a verify pass keeps each state)."""
    inputs = [x.to(v.dtype) for x in (q, k, v, a, b)]
    A_log, dt_bias = A_log.float().contiguous(), dt_bias.float().contiguous()
    outputs = []
    for t in range(v.shape[1]):
        token = [x[:, t : t + 1].contiguous() for x in inputs]
        outputs.append(torch.empty_like(token[2]))
        compiled.gated_delta_step(*token, A_log, dt_bias, state, outputs[-1])
        if trail is not None:
            trail[:, t].copy_(state)
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)

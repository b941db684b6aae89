"""Kernel entry points of the Qwen3.5 forward pass: Triton on CUDA tensors; on the CPU, the C++ kernels (kernels/cpu)
for RMSNorm, SwiGLU, an attention layer's inputs and a decode token's attention and Gated DeltaNet layer, the torch
reference for the rest.

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
    "attention_inputs",
    "causal_conv1d",
    "gated_delta_net",
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
    if x.device.type == "cpu" and weight.dtype == x.dtype and (compiled := cpu_kernels.ops()):
        if residual is None:
            return compiled.rms_norm_rows(x.contiguous(), weight.contiguous(), eps, zero_centered)
        return compiled.add_rms_norm_rows(
            x.contiguous(), residual.contiguous(), weight.contiguous(), eps, zero_centered
        )
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
    if gate.device.type == "cpu" and up.dtype == gate.dtype and (compiled := cpu_kernels.ops()):
        # Rows of the projection's halves stay where they are: [..., n] views as [rows, n] with their stride.
        width = gate.shape[-1]
        return compiled.swiglu_rows(gate.reshape(-1, width), up.reshape(-1, width)).view(gate.shape)
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


def attention_inputs(
    projected: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    eps: float,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A gated attention layer's inputs from its QKV projection's output projected [B, T, Hq * 2D + 2 * Hkv * D]
    (each query head followed by its output gate, then the keys, then the values): returns the queries, RMS-normed
    by q_norm and rotated at positions [B, T], and the gates, both [B, T, Hq, D]; the keys, normed by k_norm and
    rotated, and the values are written into the caches [B, Hkv, S, D] at positions."""
    check_float("projected", projected)
    check_ndim("projected", projected, 3, "[B, T, P]")
    check_ndim("k_cache", k_cache, 4, "[B, Hkv, S, D]")
    batch, length, width = projected.shape
    kv_heads, dim = k_cache.shape[1], k_cache.shape[3]
    check_shape("q_norm", q_norm, (dim,), "[D]")
    check_shape("k_norm", k_norm, (dim,), "[D]")
    check_shape("v_cache", v_cache, tuple(k_cache.shape), "k_cache.shape")
    check_shape("positions", positions, (batch, length), "[B, T]")
    q_width = width - 2 * kv_heads * dim
    if q_width <= 0 or q_width % (2 * dim):
        raise ValueError(f"projected has {width} values a token: not Hq * 2D + 2 * Hkv * D with D={dim}")
    q_heads = q_width // (2 * dim)
    if (
        projected.device.type == "cpu"
        and q_norm.dtype == k_norm.dtype == k_cache.dtype == v_cache.dtype == projected.dtype
        and (compiled := cpu_kernels.ops())
    ):
        return compiled.attention_inputs(
            projected.contiguous(),
            q_norm.contiguous(),
            k_norm.contiguous(),
            eps,
            positions.to(dtype=torch.long).contiguous(),
            inv_freq.float().contiguous(),
            k_cache,
            v_cache,
        )
    query_gate, key, value = projected.split((q_width, kv_heads * dim, kv_heads * dim), -1)
    query, gate = query_gate.view(batch, length, q_heads, 2 * dim).chunk(2, dim=-1)
    query = rotary_embedding(rms_norm(query, q_norm, eps), positions, inv_freq)
    key = rotary_embedding(rms_norm(key.view(batch, length, kv_heads, dim), k_norm, eps), positions, inv_freq)
    rows = torch.arange(batch, device=projected.device)[:, None]
    k_cache[rows, :, positions] = key
    v_cache[rows, :, positions] = value.view(batch, length, kv_heads, dim)
    return query, gate


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
    if (
        q.shape[1] == 1
        and (out := _fused_attention_steps(q, k_cache, v_cache, gate, start, scale)) is not None
    ):
        return out
    return _attention_ref.attention(q, k_cache, v_cache, gate, start, scale)


def _fused_attention_steps(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gate: torch.Tensor,
    start: torch.Tensor,
    scale: float,
) -> torch.Tensor | None:
    """The fused CPU step's attention of q's T positions, each as a decode step computes it; None where it cannot
    run (another device, the Triton path, no C++ kernels, or a head dim it does not read 16 values at a time)."""
    steppable = q.device.type == "cpu" and not use_triton(q) and q.shape[-1] % 16 == 0
    if not steppable or (compiled := cpu_kernels.ops()) is None:
        return None
    start = start.to(dtype=torch.long).contiguous()
    return compiled.attention_step(q.contiguous(), k_cache, v_cache, gate.contiguous(), start, scale)


def attention_as_steps(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gate: torch.Tensor,
    start: torch.Tensor,
    scale: float,
    bounds: list[int],
) -> torch.Tensor:
    """attention() of a verify pass's T positions, each rounded as the decode step for it would round: position t
    over the first bounds[t] cache positions (as the step's view of the cache), its own keys up to start_b + t. On
    the CPU the fused step takes all T positions in one call, each computed as a step computes it; elsewhere the
    steps run one by one."""
    _check_attention(q, k_cache, v_cache, gate, start)
    if (out := _fused_attention_steps(q, k_cache, v_cache, gate, start, scale)) is not None:
        return out
    steps = [
        attention(
            q[:, t : t + 1],
            k_cache[:, :, :bound],
            v_cache[:, :, :bound],
            gate[:, t : t + 1],
            start + t,
            scale,
        )
        for t, bound in enumerate(bounds)
    ]
    return torch.cat(steps, dim=1)


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
    return _gdn_ref.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, state, trail)


# Raw gate inputs that make a Gated DeltaNet step leave its state untouched: softplus -> 0 so the decay is exp(0) = 1,
# and sigmoid -> 0 so nothing is written. Used for rows that sit out a batched decode step.
FROZEN_GATE = -1e30


def gated_delta_net(
    projected: torch.Tensor,
    conv_weight: torch.Tensor,
    conv_state: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    *,
    active: torch.Tensor | None = None,
    conv_trail: torch.Tensor | None = None,
    recurrent_trail: torch.Tensor | None = None,
) -> torch.Tensor:
    """A Gated DeltaNet layer between its projections: from the input projection's output projected [B, T, P]
    (conv inputs q, k, v, then z, b, a), the causal conv, the gated delta rule on state [B, Hv, dk, dv] and the
    gated RMSNorm by silu(z); returns [B, T, Hv * dv] for the output projection. States are updated in place.

    active [B] bool: rows marked False keep their states. The trails, when given, receive the states after each
    token (see causal_conv1d and gated_delta_rule). One-token steps and verify passes on the CPU run the fused C++
    layer step, a token at a time as decode steps run, so a verify pass keeps a decode step's states exactly.
    """
    batch, length, _ = projected.shape
    value_heads, key_dim, value_dim = state.shape[1:]
    conv_dim = conv_weight.shape[0]
    key_heads = (conv_dim - value_heads * value_dim) // (2 * key_dim)
    trailed = conv_trail is not None and recurrent_trail is not None
    if (
        projected.device.type == "cpu"
        and (trailed or (length == 1 and conv_trail is recurrent_trail is None))
        and state.is_contiguous()
        and conv_state.is_contiguous()
        and conv_weight.dtype == norm_weight.dtype == projected.dtype
        and (compiled := cpu_kernels.ops())
    ):
        return compiled.gated_delta_net_step(
            projected.contiguous(),
            conv_weight.contiguous(),
            conv_state,
            A_log.float().contiguous(),
            dt_bias.float().contiguous(),
            state,
            norm_weight.contiguous(),
            eps,
            active,
            conv_trail,
            recurrent_trail,
        )
    mixed, z, b, a = projected.split((conv_dim, value_heads * value_dim, value_heads, value_heads), -1)
    if active is not None:
        # Rows sitting out keep their conv history: the conv kernel always shifts it, so put it back.
        saved_conv = conv_state.clone()
        frozen = ~active[:, None, None]
        a = a.masked_fill(frozen, FROZEN_GATE)
        b = b.masked_fill(frozen, FROZEN_GATE)
    mixed = causal_conv1d(mixed, conv_weight, conv_state, conv_trail)
    if active is not None:
        conv_state.copy_(torch.where(active[:, None, None], conv_state, saved_conv))
    query, key, value = mixed.split((key_heads * key_dim, key_heads * key_dim, value_heads * value_dim), -1)
    out = gated_delta_rule(
        query.view(batch, length, key_heads, key_dim),
        key.view(batch, length, key_heads, key_dim),
        value.view(batch, length, value_heads, value_dim),
        a,
        b,
        A_log,
        dt_bias,
        state,
        recurrent_trail,
    )
    out = gated_rms_norm(out, z.view(batch, length, value_heads, value_dim), norm_weight, eps)
    return out.reshape(batch, length, value_heads * value_dim)

"""The gated delta rule in Triton: a chunked prefill (chunk 64) and a fused recurrent step for decode.

Both start from the fp32 state [B, Hv, dk, dv] and write the final state back in place. The gates
(g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)) and the q/k L2 norms are computed inside.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.backend import interpreting
from kernels.checks import check_last_dim_contiguous

CHUNK = 64


@triton.jit
def _gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, offsets, h, mask):
    """Log-decay g and write strength beta for the given token offsets of value head h (0 where masked)."""
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    x = a + tl.load(dt_bias_ptr + h).to(tl.float32)
    # softplus with torch's threshold: linear above 20, where exp would lose all precision anyway.
    softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    g = -tl.exp(tl.load(A_log_ptr + h).to(tl.float32)) * softplus
    return tl.where(mask, g, 0.0), tl.where(mask, tl.sigmoid(b), 0.0)


@triton.jit
def _l2_normalize(x, axis: tl.constexpr):
    return x * tl.rsqrt(tl.sum(x * x, axis=axis, keep_dims=True) + 1e-6)


@triton.jit
def _chunk_prepare_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, chunk_decay_ptr,
    seq_len, value_heads, head_repeat, n_chunks,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ab, stride_at, stride_bb, stride_bt,
    scale,
    DK: tl.constexpr, DV: tl.constexpr, CHUNK: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Per (chunk, row, value head): everything of the chunk that does not depend on the incoming state."""
    c = tl.program_id(0)
    row_head = tl.program_id(1)
    b = row_head // value_heads
    h = row_head % value_heads
    kh = h // head_repeat
    offs_t = c * CHUNK + tl.arange(0, CHUNK)
    t_mask = offs_t < seq_len
    offs_k = tl.arange(0, DK)
    offs_v = tl.arange(0, DV)
    rows = tl.arange(0, CHUNK)

    b64 = b.to(tl.int64)
    t64 = offs_t[:, None].to(tl.int64)
    q = tl.load(
        q_ptr + b64 * stride_qb + t64 * stride_qt + kh * stride_qh + offs_k[None, :],
        mask=t_mask[:, None],
        other=0.0,
    )
    k = tl.load(
        k_ptr + b64 * stride_kb + t64 * stride_kt + kh * stride_kh + offs_k[None, :],
        mask=t_mask[:, None],
        other=0.0,
    )
    v = tl.load(
        v_ptr + b64 * stride_vb + t64 * stride_vt + h * stride_vh + offs_v[None, :],
        mask=t_mask[:, None],
        other=0.0,
    )
    q = _l2_normalize(q.to(tl.float32), 1) * scale
    k = _l2_normalize(k.to(tl.float32), 1)
    v = v.to(tl.float32)
    g, beta = _gates(a_ptr + b64 * stride_ab + h, b_ptr + b64 * stride_bb + h, A_log_ptr, dt_bias_ptr,
                     offs_t.to(tl.int64) * stride_at, h, t_mask)  # fmt: skip

    g_cum = tl.cumsum(g, axis=0)
    g_total = tl.sum(g, axis=0)
    causal = rows[:, None] >= rows[None, :]
    decay = tl.exp(tl.where(causal, g_cum[:, None] - g_cum[None, :], float("-inf")))
    k_beta = k * beta[:, None]
    # UT transform: invert L = I + strictly_lower(beta_i k_i.k_j decay_ij) by forward substitution, row by row.
    system = tl.where(
        rows[:, None] > rows[None, :], tl.dot(k_beta, tl.trans(k), input_precision=DOT_PRECISION) * decay, 0.0
    )
    inverse = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)
    for i in range(1, CHUNK):
        system_row = tl.sum(tl.where(rows[:, None] == i, system, 0.0), axis=0)
        new_row = tl.where(rows == i, 1.0, 0.0) - tl.sum(system_row[:, None] * inverse, axis=0)
        inverse = tl.where(rows[:, None] == i, new_row[None, :], inverse)
    w = tl.dot(inverse, k_beta * tl.exp(g_cum)[:, None], input_precision=DOT_PRECISION)
    u = tl.dot(inverse, v * beta[:, None], input_precision=DOT_PRECISION)
    aqk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * decay

    chunk_row = (row_head.to(tl.int64) * n_chunks + c) * CHUNK + rows[:, None]
    tl.store(w_ptr + chunk_row * DK + offs_k[None, :], w)
    tl.store(u_ptr + chunk_row * DV + offs_v[None, :], u)
    tl.store(qg_ptr + chunk_row * DK + offs_k[None, :], q * tl.exp(g_cum)[:, None])
    tl.store(kg_ptr + chunk_row * DK + offs_k[None, :], k * tl.exp(g_total - g_cum)[:, None])
    tl.store(aqk_ptr + chunk_row * CHUNK + rows[None, :], aqk)
    tl.store(chunk_decay_ptr + row_head * n_chunks + c, tl.exp(g_total))


@triton.jit
def _chunk_scan_kernel(
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, chunk_decay_ptr, state_ptr, out_ptr,
    seq_len, value_heads, n_chunks,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Per (row, value head, value block): carry the state across chunks and write each chunk's output."""
    row_head = tl.program_id(0)
    offs_v = tl.program_id(1) * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, DK)
    rows = tl.arange(0, CHUNK)
    state_tile = state_ptr + row_head.to(tl.int64) * DK * DV + offs_k[:, None] * DV + offs_v[None, :]
    state = tl.load(state_tile)
    b = row_head // value_heads
    h = row_head % value_heads
    for c in range(n_chunks):
        chunk_row = (row_head.to(tl.int64) * n_chunks + c) * CHUNK + rows[:, None]
        w = tl.load(w_ptr + chunk_row * DK + offs_k[None, :])
        u = tl.load(u_ptr + chunk_row * DV + offs_v[None, :])
        qg = tl.load(qg_ptr + chunk_row * DK + offs_k[None, :])
        kg = tl.load(kg_ptr + chunk_row * DK + offs_k[None, :])
        aqk = tl.load(aqk_ptr + chunk_row * CHUNK + rows[None, :])
        v_new = u - tl.dot(w, state, input_precision=DOT_PRECISION)
        out = tl.dot(qg, state, input_precision=DOT_PRECISION) + tl.dot(
            aqk, v_new, input_precision=DOT_PRECISION
        )
        decay = tl.load(chunk_decay_ptr + row_head * n_chunks + c)
        state = state * decay + tl.dot(tl.trans(kg), v_new, input_precision=DOT_PRECISION)
        offs_t = c * CHUNK + rows
        o_offsets = ((b.to(tl.int64) * seq_len + offs_t[:, None]) * value_heads + h) * DV + offs_v[None, :]
        tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty), mask=(offs_t < seq_len)[:, None])
    tl.store(state_tile, state)


@triton.jit
def _recurrent_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, state_ptr, out_ptr,
    seq_len, value_heads, head_repeat,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ab, stride_at, stride_bb, stride_bt,
    scale,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr,
):  # fmt: skip
    """Per (row, value head, value block): the token recurrence with the state slice held in registers."""
    row_head = tl.program_id(0)
    offs_v = tl.program_id(1) * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, DK)
    b = (row_head // value_heads).to(tl.int64)
    h = row_head % value_heads
    kh = h // head_repeat
    state_tile = state_ptr + row_head.to(tl.int64) * DK * DV + offs_k[:, None] * DV + offs_v[None, :]
    state = tl.load(state_tile)
    one = tl.full([1], 1, tl.int1)
    for t in range(seq_len):
        q = tl.load(q_ptr + b * stride_qb + t * stride_qt + kh * stride_qh + offs_k).to(tl.float32)
        k = tl.load(k_ptr + b * stride_kb + t * stride_kt + kh * stride_kh + offs_k).to(tl.float32)
        v = tl.load(v_ptr + b * stride_vb + t * stride_vt + h * stride_vh + offs_v).to(tl.float32)
        g, beta = _gates(a_ptr + b * stride_ab + h, b_ptr + b * stride_bb + h, A_log_ptr, dt_bias_ptr,
                         t * stride_at + tl.zeros([1], tl.int64), h, one)  # fmt: skip
        q = _l2_normalize(q, 0) * scale
        k = _l2_normalize(k, 0)
        state = state * tl.exp(g)[:, None]
        delta = beta * (v - tl.sum(state * k[:, None], axis=0))
        state += k[:, None] * delta[None, :]
        out = tl.sum(state * q[:, None], axis=0)
        o_offsets = ((b * seq_len + t) * value_heads + h) * DV + offs_v
        tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty))
    tl.store(state_tile, state)


def _input_strides(q, k, v, a, b) -> tuple[int, ...]:
    return (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *a.stride()[:2], *b.stride()[:2])


def _check(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor, state: torch.Tensor
) -> None:
    key_dim, value_dim = q.shape[-1], v.shape[-1]
    for name, dim in (("key head dim", key_dim), ("value head dim", value_dim)):
        if dim < 16 or dim & (dim - 1):
            raise ValueError(f"the Triton gated delta rule needs a power-of-two {name} >= 16, got {dim}")
    for name, t in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b)):
        check_last_dim_contiguous(name, t)
    if not state.is_contiguous():
        raise ValueError("state [B, Hv, dk, dv] must be contiguous")


def gated_delta_rule_recurrent_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, *, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Token-recurrent gated delta rule (the decode step when T == 1); state updated in place."""
    _check(q, k, v, a, b, state)
    batch, seq_len, value_heads, value_dim = v.shape
    key_dim = q.shape[-1]
    if out is None:
        out = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    block_v = value_dim if interpreting() else min(value_dim, 16)
    _recurrent_kernel[(batch * value_heads, value_dim // block_v)](
        q, k, v, a, b, A_log, dt_bias, state, out,
        seq_len, value_heads, value_heads // q.shape[2], *_input_strides(q, k, v, a, b), key_dim**-0.5,
        DK=key_dim, DV=value_dim, BV=block_v, num_warps=4,
    )  # fmt: skip
    return out


def gated_delta_rule_chunk_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, *, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Chunked gated delta rule over T tokens from `state`; the final state is written back in place."""
    _check(q, k, v, a, b, state)
    batch, seq_len, value_heads, value_dim = v.shape
    key_dim = q.shape[-1]
    if out is None:
        out = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    n_chunks = triton.cdiv(seq_len, CHUNK)
    rows = batch * value_heads * n_chunks * CHUNK
    scratch = {"device": v.device, "dtype": torch.float32}
    w, qg, kg = (torch.empty(rows, key_dim, **scratch) for _ in range(3))
    u = torch.empty(rows, value_dim, **scratch)
    aqk = torch.empty(rows, CHUNK, **scratch)
    chunk_decay = torch.empty(batch * value_heads, n_chunks, **scratch)
    precision = "ieee" if v.dtype == torch.float32 else "tf32"
    _chunk_prepare_kernel[(n_chunks, batch * value_heads)](
        q, k, v, a, b, A_log, dt_bias, w, u, qg, kg, aqk, chunk_decay,
        seq_len, value_heads, value_heads // q.shape[2], n_chunks, *_input_strides(q, k, v, a, b),
        key_dim**-0.5, DK=key_dim, DV=value_dim, CHUNK=CHUNK, DOT_PRECISION=precision, num_warps=4,
    )  # fmt: skip
    block_v = value_dim if interpreting() else min(value_dim, 32)
    _chunk_scan_kernel[(batch * value_heads, value_dim // block_v)](
        w, u, qg, kg, aqk, chunk_decay, state, out, seq_len, value_heads, n_chunks,
        DK=key_dim, DV=value_dim, BV=block_v, CHUNK=CHUNK, DOT_PRECISION=precision, num_warps=4,
    )  # fmt: skip
    return out


def gated_delta_rule_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """The fused recurrent step for one token, the chunked form for more."""
    step = gated_delta_rule_recurrent_triton if q.shape[1] == 1 else gated_delta_rule_chunk_triton
    return step(q, k, v, a, b, A_log, dt_bias, state)

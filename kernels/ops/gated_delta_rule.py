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
def _gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, tokens, stride_at, stride_bt, h, mask):
    """Log-decay g and write strength beta for the given tokens of value head h (0 where masked)."""
    a = tl.load(a_ptr + tokens * stride_at, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + tokens * stride_bt, mask=mask, other=0.0).to(tl.float32)
    x = a + tl.load(dt_bias_ptr + h).to(tl.float32)
    # softplus with torch's threshold: linear above 20, where exp would lose all precision anyway.
    softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    g = -tl.exp(tl.load(A_log_ptr + h).to(tl.float32)) * softplus
    return tl.where(mask, g, 0.0), tl.where(mask, tl.sigmoid(b), 0.0)


@triton.jit
def _l2_normalize(x, axis: tl.constexpr):
    return x * tl.rsqrt(tl.sum(x * x, axis=axis, keep_dims=True) + 1e-6)


@triton.jit
def _load_sub_chunk(
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, h, t0, seq_len,
    stride_qt, stride_kt, stride_vt, stride_at, stride_bt, scale,
    DK: tl.constexpr, DV: tl.constexpr, SUB: tl.constexpr,
):  # fmt: skip
    """Tokens [t0, t0 + SUB) of one head: normalised q (scaled) and k, v, and the gates; zeros past the end."""
    offs_t = t0 + tl.arange(0, SUB)
    t_mask = offs_t < seq_len
    t64 = offs_t.to(tl.int64)[:, None]
    offs_k = tl.arange(0, DK)[None, :]
    q = tl.load(q_ptr + t64 * stride_qt + offs_k, mask=t_mask[:, None], other=0.0).to(tl.float32)
    k = tl.load(k_ptr + t64 * stride_kt + offs_k, mask=t_mask[:, None], other=0.0).to(tl.float32)
    v = tl.load(v_ptr + t64 * stride_vt + tl.arange(0, DV)[None, :], mask=t_mask[:, None], other=0.0)
    g, beta = _gates(
        a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, offs_t.to(tl.int64), stride_at, stride_bt, h, t_mask
    )
    return _l2_normalize(q, 1) * scale, _l2_normalize(k, 1), v.to(tl.float32), g, beta


@triton.jit
def _decayed(scores, g_cum_rows, g_cum_cols, DIAGONAL: tl.constexpr, STRICT: tl.constexpr):
    """scores * exp(g_cum_i - g_cum_j), kept only for i > j (STRICT) or i >= j on a diagonal block."""
    diff = g_cum_rows[:, None] - g_cum_cols[None, :]
    if DIAGONAL:
        rows = tl.arange(0, scores.shape[0])
        keep = rows[:, None] > rows[None, :] if STRICT else rows[:, None] >= rows[None, :]
        diff = tl.where(keep, diff, float("-inf"))
    return scores * tl.exp(diff)


@triton.jit
def _invert_unit_lower(strict_lower, SUB: tl.constexpr):
    """(I + strict_lower)^-1 by forward substitution, one row per step."""
    rows = tl.arange(0, SUB)
    inverse = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)
    for i in range(1, SUB):
        row = tl.sum(tl.where(rows[:, None] == i, strict_lower, 0.0), axis=0)
        new_row = tl.where(rows == i, 1.0, 0.0) - tl.sum(row[:, None] * inverse, axis=0)
        inverse = tl.where(rows[:, None] == i, new_row[None, :], inverse)
    return inverse


@triton.jit
def _store_sub_chunk(
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, row0, w, u, qg, kg, s0, s1, s2, s3,
    DK: tl.constexpr, DV: tl.constexpr, SUB: tl.constexpr,
):  # fmt: skip
    rows = (row0 + tl.arange(0, SUB)).to(tl.int64)[:, None]
    offs_k = tl.arange(0, DK)[None, :]
    tl.store(w_ptr + rows * DK + offs_k, w)
    tl.store(u_ptr + rows * DV + tl.arange(0, DV)[None, :], u)
    tl.store(qg_ptr + rows * DK + offs_k, qg)
    tl.store(kg_ptr + rows * DK + offs_k, kg)
    cols = tl.arange(0, SUB)[None, :]
    tl.store(aqk_ptr + rows * 4 * SUB + cols, s0)
    tl.store(aqk_ptr + rows * 4 * SUB + SUB + cols, s1)
    tl.store(aqk_ptr + rows * 4 * SUB + 2 * SUB + cols, s2)
    tl.store(aqk_ptr + rows * 4 * SUB + 3 * SUB + cols, s3)


@triton.jit
def _chunk_prepare_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, chunk_decay_ptr,
    seq_len, value_heads, head_repeat, n_chunks,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ab, stride_at, stride_bb, stride_bt,
    scale,
    DK: tl.constexpr, DV: tl.constexpr, CHUNK: tl.constexpr, SUB: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Per (chunk, row, value head): everything of the chunk that does not depend on the incoming state.

    The chunk is handled as four sub-chunks of CHUNK/4 tokens, so the UT transform inverts four small
    diagonal blocks by substitution and assembles the rest of the block-triangular inverse with dots.
    """
    c = tl.program_id(0)
    row_head = tl.program_id(1)
    b = (row_head // value_heads).to(tl.int64)
    h = row_head % value_heads
    kh = h // head_repeat
    q_ptr += b * stride_qb + kh * stride_qh
    k_ptr += b * stride_kb + kh * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    a_ptr += b * stride_ab + h
    b_ptr += b * stride_bb + h
    t0 = c * CHUNK
    q0, k0, v0, g0, beta0 = _load_sub_chunk(q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, h, t0, seq_len, stride_qt, stride_kt, stride_vt, stride_at, stride_bt, scale, DK, DV, SUB)  # fmt: skip
    q1, k1, v1, g1, beta1 = _load_sub_chunk(q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, h, t0 + SUB, seq_len, stride_qt, stride_kt, stride_vt, stride_at, stride_bt, scale, DK, DV, SUB)  # fmt: skip
    q2, k2, v2, g2, beta2 = _load_sub_chunk(q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, h, t0 + 2 * SUB, seq_len, stride_qt, stride_kt, stride_vt, stride_at, stride_bt, scale, DK, DV, SUB)  # fmt: skip
    q3, k3, v3, g3, beta3 = _load_sub_chunk(q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, h, t0 + 3 * SUB, seq_len, stride_qt, stride_kt, stride_vt, stride_at, stride_bt, scale, DK, DV, SUB)  # fmt: skip

    # Cumulative log-decay from the chunk start; padded tokens have g = 0 and beta = 0.
    gc0 = tl.cumsum(g0, axis=0)
    gc1 = tl.cumsum(g1, axis=0) + tl.sum(g0, axis=0)
    gc2 = tl.cumsum(g2, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0)
    gc3 = tl.cumsum(g3, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0)
    g_total = tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0) + tl.sum(g3, axis=0)
    kb0, kb1, kb2, kb3 = k0 * beta0[:, None], k1 * beta1[:, None], k2 * beta2[:, None], k3 * beta3[:, None]

    # Blocks of L = I + strictly_lower(beta_i k_i.k_j exp(gc_i - gc_j)); L_ij = a_ij below the diagonal.
    a10 = _decayed(tl.dot(kb1, tl.trans(k0), input_precision=DOT_PRECISION), gc1, gc0, False, True)
    a20 = _decayed(tl.dot(kb2, tl.trans(k0), input_precision=DOT_PRECISION), gc2, gc0, False, True)
    a21 = _decayed(tl.dot(kb2, tl.trans(k1), input_precision=DOT_PRECISION), gc2, gc1, False, True)
    a30 = _decayed(tl.dot(kb3, tl.trans(k0), input_precision=DOT_PRECISION), gc3, gc0, False, True)
    a31 = _decayed(tl.dot(kb3, tl.trans(k1), input_precision=DOT_PRECISION), gc3, gc1, False, True)
    a32 = _decayed(tl.dot(kb3, tl.trans(k2), input_precision=DOT_PRECISION), gc3, gc2, False, True)
    t00 = _invert_unit_lower(_decayed(tl.dot(kb0, tl.trans(k0), input_precision=DOT_PRECISION), gc0, gc0, True, True), SUB)  # fmt: skip
    t11 = _invert_unit_lower(_decayed(tl.dot(kb1, tl.trans(k1), input_precision=DOT_PRECISION), gc1, gc1, True, True), SUB)  # fmt: skip
    t22 = _invert_unit_lower(_decayed(tl.dot(kb2, tl.trans(k2), input_precision=DOT_PRECISION), gc2, gc2, True, True), SUB)  # fmt: skip
    t33 = _invert_unit_lower(_decayed(tl.dot(kb3, tl.trans(k3), input_precision=DOT_PRECISION), gc3, gc3, True, True), SUB)  # fmt: skip
    # Off-diagonal blocks of L^-1: T_ij = -T_ii (sum over j <= m < i of a_im T_mj).
    t10 = -tl.dot(t11, tl.dot(a10, t00, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)
    t21 = -tl.dot(t22, tl.dot(a21, t11, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)
    t20 = -tl.dot(t22, tl.dot(a20, t00, input_precision=DOT_PRECISION) + tl.dot(a21, t10, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)  # fmt: skip
    t32 = -tl.dot(t33, tl.dot(a32, t22, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)
    t31 = -tl.dot(t33, tl.dot(a31, t11, input_precision=DOT_PRECISION) + tl.dot(a32, t21, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)  # fmt: skip
    t30 = -tl.dot(t33, tl.dot(a30, t00, input_precision=DOT_PRECISION) + tl.dot(a31, t10, input_precision=DOT_PRECISION) + tl.dot(a32, t20, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)  # fmt: skip

    # w = L^-1 (beta k exp(gc)) and u = L^-1 (beta v), block row by block row.
    x0, x1 = kb0 * tl.exp(gc0)[:, None], kb1 * tl.exp(gc1)[:, None]
    x2, x3 = kb2 * tl.exp(gc2)[:, None], kb3 * tl.exp(gc3)[:, None]
    y0, y1, y2, y3 = v0 * beta0[:, None], v1 * beta1[:, None], v2 * beta2[:, None], v3 * beta3[:, None]
    w0 = tl.dot(t00, x0, input_precision=DOT_PRECISION)
    u0 = tl.dot(t00, y0, input_precision=DOT_PRECISION)
    w1 = tl.dot(t10, x0, input_precision=DOT_PRECISION) + tl.dot(t11, x1, input_precision=DOT_PRECISION)
    u1 = tl.dot(t10, y0, input_precision=DOT_PRECISION) + tl.dot(t11, y1, input_precision=DOT_PRECISION)
    w2 = tl.dot(t20, x0, input_precision=DOT_PRECISION) + tl.dot(t21, x1, input_precision=DOT_PRECISION) + tl.dot(t22, x2, input_precision=DOT_PRECISION)  # fmt: skip
    u2 = tl.dot(t20, y0, input_precision=DOT_PRECISION) + tl.dot(t21, y1, input_precision=DOT_PRECISION) + tl.dot(t22, y2, input_precision=DOT_PRECISION)  # fmt: skip
    w3 = tl.dot(t30, x0, input_precision=DOT_PRECISION) + tl.dot(t31, x1, input_precision=DOT_PRECISION) + tl.dot(t32, x2, input_precision=DOT_PRECISION) + tl.dot(t33, x3, input_precision=DOT_PRECISION)  # fmt: skip
    u3 = tl.dot(t30, y0, input_precision=DOT_PRECISION) + tl.dot(t31, y1, input_precision=DOT_PRECISION) + tl.dot(t32, y2, input_precision=DOT_PRECISION) + tl.dot(t33, y3, input_precision=DOT_PRECISION)  # fmt: skip

    # Intra-chunk attention blocks (q_i . k_j) exp(gc_i - gc_j) for i >= j, zero above the diagonal.
    zero = tl.zeros([SUB, SUB], dtype=tl.float32)
    s00 = _decayed(tl.dot(q0, tl.trans(k0), input_precision=DOT_PRECISION), gc0, gc0, True, False)
    s10 = _decayed(tl.dot(q1, tl.trans(k0), input_precision=DOT_PRECISION), gc1, gc0, False, False)
    s11 = _decayed(tl.dot(q1, tl.trans(k1), input_precision=DOT_PRECISION), gc1, gc1, True, False)
    s20 = _decayed(tl.dot(q2, tl.trans(k0), input_precision=DOT_PRECISION), gc2, gc0, False, False)
    s21 = _decayed(tl.dot(q2, tl.trans(k1), input_precision=DOT_PRECISION), gc2, gc1, False, False)
    s22 = _decayed(tl.dot(q2, tl.trans(k2), input_precision=DOT_PRECISION), gc2, gc2, True, False)
    s30 = _decayed(tl.dot(q3, tl.trans(k0), input_precision=DOT_PRECISION), gc3, gc0, False, False)
    s31 = _decayed(tl.dot(q3, tl.trans(k1), input_precision=DOT_PRECISION), gc3, gc1, False, False)
    s32 = _decayed(tl.dot(q3, tl.trans(k2), input_precision=DOT_PRECISION), gc3, gc2, False, False)
    s33 = _decayed(tl.dot(q3, tl.trans(k3), input_precision=DOT_PRECISION), gc3, gc3, True, False)

    row0 = (row_head * n_chunks + c) * CHUNK
    _store_sub_chunk(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, row0, w0, u0, q0 * tl.exp(gc0)[:, None], k0 * tl.exp(g_total - gc0)[:, None], s00, zero, zero, zero, DK, DV, SUB)  # fmt: skip
    _store_sub_chunk(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, row0 + SUB, w1, u1, q1 * tl.exp(gc1)[:, None], k1 * tl.exp(g_total - gc1)[:, None], s10, s11, zero, zero, DK, DV, SUB)  # fmt: skip
    _store_sub_chunk(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, row0 + 2 * SUB, w2, u2, q2 * tl.exp(gc2)[:, None], k2 * tl.exp(g_total - gc2)[:, None], s20, s21, s22, zero, DK, DV, SUB)  # fmt: skip
    _store_sub_chunk(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, row0 + 3 * SUB, w3, u3, q3 * tl.exp(gc3)[:, None], k3 * tl.exp(g_total - gc3)[:, None], s30, s31, s32, s33, DK, DV, SUB)  # fmt: skip
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
                         t + tl.zeros([1], tl.int64), stride_at, stride_bt, h, one)  # fmt: skip
        q = _l2_normalize(q, 0) * scale
        k = _l2_normalize(k, 0)
        state = state * tl.exp(g)[:, None]
        delta = beta * (v - tl.sum(state * k[:, None], axis=0))
        state += k[:, None] * delta[None, :]
        out = tl.sum(state * q[:, None], axis=0)
        o_offsets = ((b * seq_len + t) * value_heads + h) * DV + offs_v
        tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty))
    tl.store(state_tile, state)


def _input_strides(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[int, ...]:
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
        key_dim**-0.5, DK=key_dim, DV=value_dim, CHUNK=CHUNK, SUB=CHUNK // 4, DOT_PRECISION=precision,
        num_warps=8,  # some twenty 16x128 fp32 tiles are live at once
    )  # fmt: skip
    block_v = value_dim if interpreting() else min(value_dim, 32)
    _chunk_scan_kernel[(batch * value_heads, value_dim // block_v)](
        w, u, qg, kg, aqk, chunk_decay, state, out, seq_len, value_heads, n_chunks,
        DK=key_dim, DV=value_dim, BV=block_v, CHUNK=CHUNK, DOT_PRECISION=precision,
        # fp32 dot operands are staged in shared memory: one stage of 64x128 tiles already takes ~130 KB.
        num_warps=4, num_stages=1,
    )  # fmt: skip
    return out


def gated_delta_rule_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """The fused recurrent step for one token, the chunked form for more."""
    step = gated_delta_rule_recurrent_triton if q.shape[1] == 1 else gated_delta_rule_chunk_triton
    return step(q, k, v, a, b, A_log, dt_bias, state)

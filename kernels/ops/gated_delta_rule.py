"""The gated delta rule in Triton: a chunked prefill (chunk 64) and a fused recurrent step for decode.

Both start from the fp32 state [B, Hv, dk, dv] and write the final state back in place. The gates
(g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)) and the q/k L2 norms are computed inside.
The chunked form runs three kernels: the UT transform's inverse per chunk, the rest of each chunk's
state-independent work, then the scan over chunks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import check_last_dim_contiguous
from kernels.ops import launch

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
def _load_tokens(ptr, t0, seq_len, stride_t, WIDTH: tl.constexpr, ROWS: tl.constexpr):
    """Tokens [t0, t0 + ROWS) of a [T, WIDTH] slice in fp32, zeros past the end."""
    offs_t = t0 + tl.arange(0, ROWS)
    rows = ptr + offs_t.to(tl.int64)[:, None] * stride_t + tl.arange(0, WIDTH)[None, :]
    return tl.load(rows, mask=(offs_t < seq_len)[:, None], other=0.0).to(tl.float32)


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
def _load_block(matrix_ptr, i, j, SUB: tl.constexpr, WIDTH: tl.constexpr):
    """Block (i, j) of SUB x SUB elements of a row-major matrix WIDTH elements wide."""
    rows = (i * SUB + tl.arange(0, SUB))[:, None] * WIDTH
    return tl.load(matrix_ptr + rows + j * SUB + tl.arange(0, SUB)[None, :])


@triton.jit
def _store_block_row(matrix_ptr, i, s0, s1, s2, s3, SUB: tl.constexpr):
    """Block row i of a row-major matrix 4 * SUB elements wide: four SUB x SUB blocks side by side."""
    rows = matrix_ptr + (i * SUB + tl.arange(0, SUB))[:, None] * 4 * SUB + tl.arange(0, SUB)[None, :]
    tl.store(rows, s0)
    tl.store(rows + SUB, s1)
    tl.store(rows + 2 * SUB, s2)
    tl.store(rows + 3 * SUB, s3)


@triton.jit
def _chunk_inverse_kernel(
    k_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, inverse_ptr, g_cum_ptr, chunk_decay_ptr,
    seq_len, value_heads, head_repeat, n_chunks,
    stride_kb, stride_kt, stride_kh, stride_ab, stride_at, stride_bb, stride_bt,
    DK: tl.constexpr, CHUNK: tl.constexpr, SUB: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Per (chunk, row, value head): the UT transform's L^-1 for L = I + strictly_lower(beta_i k_i.k_j decay_ij),
    the cumulative log-decay from the chunk start and the chunk's total decay.

    L's strictly lower part comes from one CHUNK x CHUNK dot and is written where the inverse goes, then read
    back as SUB x SUB blocks (Triton cannot cut blocks out of a tile in registers, and a SUB-row dot per block
    would hold its SUB x dk operands in every warp: a kilobyte of spills). The four diagonal blocks are inverted
    by substitution and the rest of the block-triangular inverse is assembled with small dots.
    """
    c = tl.program_id(0)
    row_head = tl.program_id(1)
    b = (row_head // value_heads).to(tl.int64)
    h = row_head % value_heads
    t0 = c * CHUNK
    offs_t = t0 + tl.arange(0, CHUNK)
    # Padded tokens have g = 0 and beta = 0.
    g, beta = _gates(
        a_ptr + b * stride_ab + h, b_ptr + b * stride_bb + h, A_log_ptr, dt_bias_ptr, offs_t.to(tl.int64),
        stride_at, stride_bt, h, offs_t < seq_len,
    )  # fmt: skip
    g_cum = tl.cumsum(g, axis=0)
    k_rows = k_ptr + b * stride_kb + (h // head_repeat) * stride_kh
    k = _l2_normalize(_load_tokens(k_rows, t0, seq_len, stride_kt, DK, CHUNK), 1)
    strict_lower = _decayed(
        tl.dot(k * beta[:, None], tl.trans(k), input_precision=DOT_PRECISION), g_cum, g_cum, True, True
    )
    row0 = (row_head * n_chunks + c) * CHUNK
    rows = row0 + tl.arange(0, CHUNK)
    matrix = inverse_ptr + row0.to(tl.int64) * CHUNK
    tl.store(matrix + tl.arange(0, CHUNK)[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :], strict_lower)
    tl.store(g_cum_ptr + rows, g_cum)
    tl.store(chunk_decay_ptr + row_head * n_chunks + c, tl.exp(tl.sum(g, axis=0)))
    # All of L is written before any block is read back.
    tl.debug_barrier()

    t00 = _invert_unit_lower(_load_block(matrix, 0, 0, SUB, CHUNK), SUB)
    t11 = _invert_unit_lower(_load_block(matrix, 1, 1, SUB, CHUNK), SUB)
    t22 = _invert_unit_lower(_load_block(matrix, 2, 2, SUB, CHUNK), SUB)
    t33 = _invert_unit_lower(_load_block(matrix, 3, 3, SUB, CHUNK), SUB)
    a10, a20, a30 = (_load_block(matrix, 1, 0, SUB, CHUNK), _load_block(matrix, 2, 0, SUB, CHUNK),
                     _load_block(matrix, 3, 0, SUB, CHUNK))  # fmt: skip
    a21, a31, a32 = (_load_block(matrix, 2, 1, SUB, CHUNK), _load_block(matrix, 3, 1, SUB, CHUNK),
                     _load_block(matrix, 3, 2, SUB, CHUNK))  # fmt: skip
    # Off-diagonal blocks of L^-1: T_ij = -T_ii (sum over j <= m < i of a_im T_mj).
    t10 = -tl.dot(t11, tl.dot(a10, t00, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)
    t21 = -tl.dot(t22, tl.dot(a21, t11, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)
    t20 = -tl.dot(t22, tl.dot(a20, t00, input_precision=DOT_PRECISION) + tl.dot(a21, t10, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)  # fmt: skip
    t32 = -tl.dot(t33, tl.dot(a32, t22, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)
    t31 = -tl.dot(t33, tl.dot(a31, t11, input_precision=DOT_PRECISION) + tl.dot(a32, t21, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)  # fmt: skip
    t30 = -tl.dot(t33, tl.dot(a30, t00, input_precision=DOT_PRECISION) + tl.dot(a31, t10, input_precision=DOT_PRECISION) + tl.dot(a32, t20, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION)  # fmt: skip
    # Every block of L is read before the inverse overwrites it.
    tl.debug_barrier()
    zero = tl.zeros([SUB, SUB], dtype=tl.float32)
    _store_block_row(matrix, 0, t00, zero, zero, zero, SUB)
    _store_block_row(matrix, 1, t10, t11, zero, zero, SUB)
    _store_block_row(matrix, 2, t20, t21, t22, zero, SUB)
    _store_block_row(matrix, 3, t30, t31, t32, t33, SUB)


@triton.jit
def _chunk_prepare_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, inverse_ptr, g_cum_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr,
    seq_len, value_heads, head_repeat, n_chunks,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ab, stride_at, stride_bb, stride_bt,
    scale,
    DK: tl.constexpr, DV: tl.constexpr, CHUNK: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Per (chunk, row, value head): the rest of the chunk that does not depend on the incoming state.

    w = L^-1 (beta k exp(g_cum)), u = L^-1 (beta v), the decayed q and k, and the causal intra-chunk scores.
    """
    c = tl.program_id(0)
    row_head = tl.program_id(1)
    b = (row_head // value_heads).to(tl.int64)
    h = row_head % value_heads
    kh = h // head_repeat
    t0 = c * CHUNK
    offs_t = t0 + tl.arange(0, CHUNK)
    _, beta = _gates(
        a_ptr + b * stride_ab + h, b_ptr + b * stride_bb + h, A_log_ptr, dt_bias_ptr, offs_t.to(tl.int64),
        stride_at, stride_bt, h, offs_t < seq_len,
    )  # fmt: skip
    row0 = ((row_head * n_chunks + c) * CHUNK).to(tl.int64)
    rows = row0 + tl.arange(0, CHUNK)
    g_cum = tl.load(g_cum_ptr + rows)
    g_total = tl.load(g_cum_ptr + row0 + CHUNK - 1)
    offs_k = tl.arange(0, DK)[None, :]

    k = _l2_normalize(
        _load_tokens(k_ptr + b * stride_kb + kh * stride_kh, t0, seq_len, stride_kt, DK, CHUNK), 1
    )
    q = _l2_normalize(
        _load_tokens(q_ptr + b * stride_qb + kh * stride_qh, t0, seq_len, stride_qt, DK, CHUNK), 1
    )
    q = q * scale
    aqk = _decayed(tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION), g_cum, g_cum, True, False)
    tl.store(aqk_ptr + rows[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :], aqk)
    tl.store(qg_ptr + rows[:, None] * DK + offs_k, q * tl.exp(g_cum)[:, None])
    tl.store(kg_ptr + rows[:, None] * DK + offs_k, k * tl.exp(g_total - g_cum)[:, None])

    inverse = tl.load(inverse_ptr + rows[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :])
    w = tl.dot(inverse, (k * beta[:, None]) * tl.exp(g_cum)[:, None], input_precision=DOT_PRECISION)
    tl.store(w_ptr + rows[:, None] * DK + offs_k, w)
    v = _load_tokens(v_ptr + b * stride_vb + h * stride_vh, t0, seq_len, stride_vt, DV, CHUNK)
    u = tl.dot(inverse, v * beta[:, None], input_precision=DOT_PRECISION)
    tl.store(u_ptr + rows[:, None] * DV + tl.arange(0, DV)[None, :], u)


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
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, state_ptr, out_ptr, trail_ptr,
    seq_len, value_heads, head_repeat,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh, stride_ab, stride_at, stride_bb, stride_bt,
    scale,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, TRAIL: tl.constexpr,
):  # fmt: skip
    """Per (row, value head, value block): the token recurrence with the state slice held in registers; with
    TRAIL, the slice after each token is stored to trail [B, T, Hv, dk, dv] as well."""
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
        if TRAIL:
            position = ((b * seq_len + t) * value_heads + h) * DK * DV
            tl.store(trail_ptr + position + offs_k[:, None] * DV + offs_v[None, :], state)
    tl.store(state_tile, state)


def _input_strides(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[int, ...]:
    return (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *a.stride()[:2], *b.stride()[:2])


def _checked_output(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor, state: torch.Tensor,
    out: torch.Tensor | None,
) -> torch.Tensor:  # fmt: skip
    """The output [B, T, Hv, dv] after checking the layouts the kernels index."""
    key_dim, value_dim = q.shape[-1], v.shape[-1]
    for name, dim in (("key head dim", key_dim), ("value head dim", value_dim)):
        if dim < 16 or dim & (dim - 1):
            raise ValueError(f"the Triton gated delta rule needs a power-of-two {name} >= 16, got {dim}")
    check_last_dim_contiguous(q=q, k=k, v=v, a=a, b=b)
    if not state.is_contiguous():
        raise ValueError("state [B, Hv, dk, dv] must be contiguous")
    return torch.empty(v.shape, dtype=v.dtype, device=v.device) if out is None else out


def gated_delta_rule_recurrent_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, *, out: torch.Tensor | None = None,
    trail: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Token-recurrent gated delta rule (the decode step when T == 1, a verify pass with a trail); state updated in
    place, the state after each token written to trail [B, T, Hv, dk, dv] when given."""
    out = _checked_output(q, k, v, a, b, state, out)
    if trail is not None and not trail.is_contiguous():
        raise ValueError("trail [B, T, Hv, dk, dv] must be contiguous")
    batch, seq_len, value_heads, value_dim = v.shape
    key_dim = q.shape[-1]
    config = launch.gdn_recurrent_config(launch.gpu_of(v.device), value_dim)
    launch.run(
        _recurrent_kernel, (batch * value_heads, value_dim // config.kwargs["BV"]),
        (q, k, v, a, b, A_log, dt_bias, state, out, state if trail is None else trail, seq_len, value_heads,
         value_heads // q.shape[2], *_input_strides(q, k, v, a, b), key_dim**-0.5),
        {"DK": key_dim, "DV": value_dim, "TRAIL": trail is not None},
        config,
    )  # fmt: skip
    return out


def gated_delta_rule_chunk_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, *, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Chunked gated delta rule over T tokens from `state`; the final state is written back in place."""
    out = _checked_output(q, k, v, a, b, state, out)
    batch, seq_len, value_heads, value_dim = v.shape
    key_dim = q.shape[-1]
    head_repeat = value_heads // q.shape[2]
    n_chunks = triton.cdiv(seq_len, CHUNK)
    rows = batch * value_heads * n_chunks * CHUNK
    scratch = {"device": v.device, "dtype": torch.float32}
    w, qg, kg = (torch.empty(rows, key_dim, **scratch) for _ in range(3))
    u = torch.empty(rows, value_dim, **scratch)
    inverse, aqk = (torch.empty(rows, CHUNK, **scratch) for _ in range(2))
    g_cum = torch.empty(rows, **scratch)
    chunk_decay = torch.empty(batch * value_heads, n_chunks, **scratch)
    precision = "ieee" if v.dtype == torch.float32 else "tf32"
    gpu = launch.gpu_of(v.device)
    launch.run(
        _chunk_inverse_kernel, (n_chunks, batch * value_heads),
        (k, a, b, A_log, dt_bias, inverse, g_cum, chunk_decay, seq_len, value_heads, head_repeat, n_chunks,
         *k.stride()[:3], *a.stride()[:2], *b.stride()[:2]),
        {"DK": key_dim, "CHUNK": CHUNK, "SUB": CHUNK // 4, "DOT_PRECISION": precision},
        launch.gdn_inverse_config(),
    )  # fmt: skip
    launch.run(
        _chunk_prepare_kernel, (n_chunks, batch * value_heads),
        (q, k, v, a, b, A_log, dt_bias, inverse, g_cum, w, u, qg, kg, aqk,
         seq_len, value_heads, head_repeat, n_chunks, *_input_strides(q, k, v, a, b), key_dim**-0.5),
        {"DK": key_dim, "DV": value_dim, "CHUNK": CHUNK, "DOT_PRECISION": precision},
        launch.gdn_prepare_config(),
    )  # fmt: skip
    config = launch.gdn_scan_config(gpu, value_dim)
    launch.run(
        _chunk_scan_kernel, (batch * value_heads, value_dim // config.kwargs["BV"]),
        (w, u, qg, kg, aqk, chunk_decay, state, out, seq_len, value_heads, n_chunks),
        {"DK": key_dim, "DV": value_dim, "CHUNK": CHUNK, "DOT_PRECISION": precision},
        config,
    )  # fmt: skip
    return out


def gated_delta_rule_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, trail: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """The fused recurrent step for one token or a trail of per-token states, the chunked form for more."""
    if q.shape[1] == 1 or trail is not None:
        return gated_delta_rule_recurrent_triton(q, k, v, a, b, A_log, dt_bias, state, trail=trail)
    return gated_delta_rule_chunk_triton(q, k, v, a, b, A_log, dt_bias, state)

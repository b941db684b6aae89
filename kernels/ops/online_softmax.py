"""The online-softmax step of flash attention, shared by the prefill and decode kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def attend_key_block(
    q,
    acc,
    m_i,
    l_i,
    k_base,
    v_base,
    stride_ks,
    stride_vs,
    n0,
    kv_end,
    q_pos,
    offs_d,
    d_mask,
    qk_scale,
    BLOCK_N: tl.constexpr,
    LOW_PRECISION_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    MASK_TAIL: tl.constexpr,
    CAUSAL_MASK: tl.constexpr,
):
    """Keys and values [n0, n0 + BLOCK_N) against the query tile q; returns the updated (acc, m_i, l_i).

    Scores are in log2 units (qk_scale includes log2(e)). Keys at or past kv_end are masked out when MASK_TAIL
    is set; CAUSAL_MASK also hides the keys after each query's position q_pos (and implies the tail mask).
    q_pos is only read under CAUSAL_MASK.
    """
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < kv_end
    kv_mask = n_mask[:, None] & d_mask[None, :]
    k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
    # The interpreter cannot do bf16 arithmetic: widen unless a GPU's tensor cores take the tiles as stored.
    if not LOW_PRECISION_DOT:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    if CAUSAL_MASK:
        qk = tl.where((offs_n[None, :] <= q_pos[:, None]) & n_mask[None, :], qk, float("-inf"))
    elif MASK_TAIL:
        qk = tl.where(n_mask[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, axis=1))
    p = tl.exp2(qk - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i

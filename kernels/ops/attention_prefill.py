"""Prefill attention in Triton: causal flash attention of T new queries per row over a KV cache prefix.

GQA, a per-row prefix offset (the new tokens sit at [start_b, start_b + T) in the cache) and the sigmoid
output gate applied in the epilogue.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.checks import check_last_dim_contiguous
from kernels.ops import launch
from kernels.ops.attention_common import LOG2_E, dot_settings
from kernels.ops.online_softmax import attend_key_block


@triton.jit
def _attention_prefill_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    gate_ptr,
    start_ptr,
    out_ptr,
    seq_len,
    seq_bucket,
    q_heads,
    group,
    stride_qb,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_gb,
    stride_gt,
    stride_gh,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOW_PRECISION_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """seq_bucket is not read: it keys the autotuner on the length (launch.sequence_bucket)."""
    block_m = tl.program_id(0)
    row_head = tl.program_id(1)
    b = row_head // q_heads
    h = row_head % q_heads
    kv_head = h // group
    start = tl.load(start_ptr + b).to(tl.int32)

    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    m_mask = offs_m < seq_len
    q_offsets = b.to(tl.int64) * stride_qb + offs_m[:, None].to(tl.int64) * stride_qt + h * stride_qh
    q = tl.load(q_ptr + q_offsets + offs_d[None, :], mask=m_mask[:, None] & d_mask[None, :], other=0.0)
    if not LOW_PRECISION_DOT:
        q = q.to(tl.float32)
    q_pos = start + offs_m

    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Keys before the block's first query are visible to all its rows: no mask there, a mask on the rest.
    kv_end = start + tl.minimum((block_m + 1) * BLOCK_M, seq_len)
    unmasked_end = ((start + block_m * BLOCK_M) // BLOCK_N) * BLOCK_N
    for n0 in range(0, unmasked_end, BLOCK_N):
        acc, m_i, l_i = attend_key_block(
            q, acc, m_i, l_i, k_base, v_base, stride_ks, stride_vs, n0, kv_end, q_pos, offs_d, d_mask,
            qk_scale, BLOCK_N, LOW_PRECISION_DOT, DOT_PRECISION, MASK_TAIL=False, CAUSAL_MASK=False,
        )  # fmt: skip
    for n0 in range(unmasked_end, kv_end, BLOCK_N):
        acc, m_i, l_i = attend_key_block(
            q, acc, m_i, l_i, k_base, v_base, stride_ks, stride_vs, n0, kv_end, q_pos, offs_d, d_mask,
            qk_scale, BLOCK_N, LOW_PRECISION_DOT, DOT_PRECISION, MASK_TAIL=True, CAUSAL_MASK=True,
        )  # fmt: skip

    g_offsets = b.to(tl.int64) * stride_gb + offs_m[:, None].to(tl.int64) * stride_gt + h * stride_gh
    io_mask = m_mask[:, None] & d_mask[None, :]
    gate = tl.load(gate_ptr + g_offsets + offs_d[None, :], mask=io_mask, other=0.0).to(tl.float32)
    out = acc / l_i[:, None] * tl.sigmoid(gate)
    o_offsets = ((b.to(tl.int64) * seq_len + offs_m[:, None]) * q_heads + h) * HEAD_DIM
    tl.store(out_ptr + o_offsets + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=io_mask)


@functools.lru_cache(maxsize=16)
def _tuned_kernel(gpu: launch.Gpu, head_dim: int, itemsize: int) -> triton.runtime.Autotuner:
    """The kernel autotuned among the tiles that fit this GPU, per head size, precision and length bucket."""
    configs = launch.prefill_attention_configs(gpu, head_dim, itemsize)
    return triton.autotune(configs=configs, key=["HEAD_DIM", "LOW_PRECISION_DOT", "seq_bucket"])(
        _attention_prefill_kernel
    )


def attention_prefill_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gate: torch.Tensor,
    start: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch causal prefill attention; q, gate [B, T, Hq, D] and caches [B, Hkv, S_max, D] with unit last stride."""
    check_last_dim_contiguous(q=q, k_cache=k_cache, v_cache=v_cache, gate=gate)
    batch, seq_len, q_heads, head_dim = q.shape
    group = q_heads // k_cache.shape[1]
    out = launch.output_like(q, out)
    if not q.numel():
        return out
    low_precision, precision = dot_settings(q.dtype)

    def grid(meta: dict) -> tuple[int, int]:
        return triton.cdiv(seq_len, meta["BLOCK_M"]), batch * q_heads

    launch.run_tuned(
        _tuned_kernel(launch.gpu_of(q.device), head_dim, q.element_size()), grid,
        (q, k_cache, v_cache, gate, start, out, seq_len, launch.sequence_bucket(seq_len), q_heads, group,
         *q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], *gate.stride()[:3], scale * LOG2_E),
        {"HEAD_DIM": head_dim, "BLOCK_D": triton.next_power_of_2(head_dim),
         "LOW_PRECISION_DOT": low_precision, "DOT_PRECISION": precision},
    )  # fmt: skip
    return out

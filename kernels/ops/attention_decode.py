"""Decode attention in Triton: flash-decoding over the KV cache for one new query token per row.

The query heads of one KV group are packed into one tile, the cache length is split across programs so
that a few KV heads still fill the GPU, and a combine step merges the splits and applies the sigmoid gate.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import check_last_dim_contiguous
from kernels.ops import launch
from kernels.ops.attention_common import LOG2_E, dot_settings
from kernels.ops.online_softmax import attend_key_block

MAX_SPLITS = 128


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    start_ptr,
    partial_out_ptr,
    partial_lse_ptr,
    kv_heads,
    group,
    n_splits,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOW_PRECISION_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    row_kv_head = tl.program_id(0)
    split = tl.program_id(1)
    b = row_kv_head // kv_heads
    kv_head = row_kv_head % kv_heads
    kv_len = tl.load(start_ptr + b).to(tl.int32) + 1
    # Splits cover the row's real length (not the cache capacity), in whole key blocks.
    per_split = tl.cdiv(tl.cdiv(kv_len, n_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, kv_len)

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < group
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * group + offs_g
    q_offsets = b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptr + q_offsets, mask=g_mask[:, None] & d_mask[None, :], other=0.0)
    if not LOW_PRECISION_DOT:
        q = q.to(tl.float32)

    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        # The new token is the row's last key, so every key below hi is visible: only the tail is masked.
        acc, m_i, l_i = attend_key_block(
            q, acc, m_i, l_i, k_base, v_base, stride_ks, stride_vs, n0, hi, None, offs_d, d_mask,
            qk_scale, BLOCK_N, LOW_PRECISION_DOT, DOT_PRECISION, MASK_TAIL=True, CAUSAL_MASK=False,
        )  # fmt: skip

    # An empty split (past the row's length) leaves weight zero in the combine: lse = -inf, output 0.
    has_keys = l_i > 0
    lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    partial = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    slot = (b * kv_heads * group + heads) * n_splits + split
    tl.store(partial_lse_ptr + slot, lse, mask=g_mask)
    p_offsets = slot[:, None].to(tl.int64) * HEAD_DIM + offs_d[None, :]
    tl.store(partial_out_ptr + p_offsets, partial, mask=g_mask[:, None] & d_mask[None, :])


@triton.jit
def _decode_combine_kernel(
    partial_out_ptr,
    partial_lse_ptr,
    gate_ptr,
    out_ptr,
    q_heads,
    n_splits,
    stride_gb,
    stride_gh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    SPLITS_PER_STEP: tl.constexpr,
):
    row_head = tl.program_id(0)
    b = row_head // q_heads
    h = row_head % q_heads
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    lse_row = partial_lse_ptr + row_head * n_splits
    all_lse = tl.load(
        lse_row + tl.arange(0, BLOCK_S), mask=tl.arange(0, BLOCK_S) < n_splits, other=float("-inf")
    )
    lse_max = tl.max(all_lse, axis=0)
    total = tl.sum(tl.exp2(all_lse - lse_max), axis=0)
    out = tl.zeros([BLOCK_D], dtype=tl.float32)
    # A few splits at a time, so the partial outputs never occupy more than a small tile of registers.
    for s0 in range(0, n_splits, SPLITS_PER_STEP):
        offs_s = s0 + tl.arange(0, SPLITS_PER_STEP)
        s_mask = offs_s < n_splits
        weights = tl.exp2(tl.load(lse_row + offs_s, mask=s_mask, other=float("-inf")) - lse_max) / total
        p_offsets = (row_head * n_splits + offs_s[:, None]).to(tl.int64) * HEAD_DIM + offs_d[None, :]
        partial = tl.load(partial_out_ptr + p_offsets, mask=s_mask[:, None] & d_mask[None, :], other=0.0)
        out += tl.sum(weights[:, None] * partial, axis=0)
    gate = tl.load(gate_ptr + b * stride_gb + h * stride_gh + offs_d, mask=d_mask, other=0.0).to(tl.float32)
    out = out * tl.sigmoid(gate)
    tl.store(
        out_ptr + row_head.to(tl.int64) * HEAD_DIM + offs_d, out.to(out_ptr.dtype.element_ty), mask=d_mask
    )


def split_count(batch: int, kv_heads: int, max_len: int, gpu: launch.Gpu, block_n: int) -> int:
    """Splits per (row, KV head): about two waves of programs over the GPU, at most one per key block."""
    target = 4 if gpu.interpreted else triton.cdiv(2 * gpu.multiprocessors, batch * kv_heads)
    return max(1, min(target, triton.cdiv(max_len, block_n), MAX_SPLITS))


def attention_decode_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gate: torch.Tensor,
    start: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
    n_splits: int | None = None,
) -> torch.Tensor:
    """Launch split-KV decode attention for q, gate [B, 1, Hq, D]; the new key sits at start_b in the cache."""
    batch, seq_len, q_heads, head_dim = q.shape
    if seq_len != 1:
        raise ValueError(f"decode attention takes one new token per row, got {seq_len}")
    check_last_dim_contiguous(q=q, k_cache=k_cache, v_cache=v_cache, gate=gate)
    kv_heads, max_len = k_cache.shape[1], k_cache.shape[2]
    group = q_heads // kv_heads
    out = launch.output_like(q, out)
    gpu = launch.gpu_of(q.device)
    config = launch.decode_attention_config(gpu, head_dim, q.element_size())
    n_splits = n_splits or split_count(batch, kv_heads, max_len, gpu, config.kwargs["BLOCK_N"])
    partial_out = torch.empty(batch, q_heads, n_splits, head_dim, device=q.device, dtype=torch.float32)
    partial_lse = torch.empty(batch, q_heads, n_splits, device=q.device, dtype=torch.float32)
    low_precision, precision = dot_settings(q.dtype)
    block_d = triton.next_power_of_2(head_dim)
    launch.run(
        _decode_split_kernel, (batch * kv_heads, n_splits),
        (q, k_cache, v_cache, start, partial_out, partial_lse, kv_heads, group, n_splits,
         q.stride(0), q.stride(2), *k_cache.stride()[:3], *v_cache.stride()[:3], scale * LOG2_E),
        {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_G": max(16, triton.next_power_of_2(group)),
         "LOW_PRECISION_DOT": low_precision, "DOT_PRECISION": precision},
        config,
    )  # fmt: skip
    launch.run(
        _decode_combine_kernel, (batch * q_heads,),
        (partial_out, partial_lse, gate, out, q_heads, n_splits, gate.stride(0), gate.stride(2)),
        {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_S": triton.next_power_of_2(n_splits)},
        launch.decode_combine_config(),
    )  # fmt: skip
    return out

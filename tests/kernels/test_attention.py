"""Prefill and decode attention kernels against torch SDPA with the sigmoid gate, and the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.ops.attention_decode import attention_decode_triton
from kernels.ops.attention_prefill import attention_prefill_triton
from kernels.reference.attention import attention
from tests.kernels.common import DEVICE, DTYPES, assert_close, poisoned, randn


def _sdpa_with_gate(q, k_cache, v_cache, gate, start, scale):
    """Row by row: full SDPA over the row's visible cache with an explicit causal offset mask."""
    rows = []
    new_tokens, q_heads = q.shape[1], q.shape[2]
    group = q_heads // k_cache.shape[1]
    for b in range(q.shape[0]):
        length = int(start[b]) + new_tokens
        keys = k_cache[b, :, :length].float().repeat_interleave(group, dim=0)
        values = v_cache[b, :, :length].float().repeat_interleave(group, dim=0)
        mask = torch.ones(new_tokens, length, dtype=torch.bool, device=q.device).tril(int(start[b]))
        out = F.scaled_dot_product_attention(
            q[b].float().transpose(0, 1), keys, values, attn_mask=mask, scale=scale
        )
        rows.append(out.transpose(0, 1) * torch.sigmoid(gate[b].float()))
    return torch.stack(rows)


def _case(batch, new_tokens, q_heads, kv_heads, head_dim, starts, dtype, spare=3):
    start = torch.tensor(starts, device=DEVICE)
    max_len = max(starts) + new_tokens + spare
    q, gate = (
        randn(batch, new_tokens, q_heads, head_dim, dtype=dtype),
        randn(batch, new_tokens, q_heads, head_dim, dtype=dtype),
    )
    k_cache = randn(batch, kv_heads, max_len, head_dim, dtype=dtype)
    v_cache = randn(batch, kv_heads, max_len, head_dim, dtype=dtype)
    return q, k_cache, v_cache, gate, start


PREFILL_CASES = [
    # batch, new tokens, q heads, kv heads, head_dim, prefix per row
    (1, 20, 2, 1, 32, [0]),
    (2, 17, 4, 2, 64, [0, 23]),
    (2, 5, 2, 2, 48, [40, 3]),
    (1, 9, 4, 1, 256, [30]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", PREFILL_CASES)
def test_prefill_attention(case, dtype):
    q, k_cache, v_cache, gate, start = _case(*case, dtype=dtype)
    scale = q.shape[-1] ** -0.5
    out = attention_prefill_triton(
        q, k_cache, v_cache, gate, start, scale, out=poisoned(*q.shape, dtype=dtype)
    )
    assert_close(out, _sdpa_with_gate(q, k_cache, v_cache, gate, start, scale), dtype)
    assert_close(out, attention(q, k_cache, v_cache, gate, start, scale), dtype)


def test_prefill_attention_reads_strided_query_and_gate():
    # q and gate as the two halves of one fused projection, as the model produces them.
    fused = randn(1, 6, 2, 2 * 32)
    q, gate = fused[..., :32], fused[..., 32:]
    k_cache, v_cache = randn(1, 1, 16, 32), randn(1, 1, 16, 32)
    start = torch.tensor([4], device=DEVICE)
    out = attention_prefill_triton(q, k_cache, v_cache, gate, start, 32**-0.5)
    assert_close(out, attention(q, k_cache, v_cache, gate, start, 32**-0.5), torch.float32)


DECODE_CASES = [
    # batch, q heads, kv heads, head_dim, prefix per row, splits
    (1, 4, 1, 64, [0], None),
    (2, 8, 2, 256, [130, 7], None),
    (3, 4, 2, 48, [200, 64, 1], 11),
    # One split per row, so its loop folds several key blocks into the running max and sum.
    (2, 8, 2, 40, [150, 90], 1),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", DECODE_CASES)
def test_decode_attention(case, dtype):
    batch, q_heads, kv_heads, head_dim, starts, splits = case
    q, k_cache, v_cache, gate, start = _case(batch, 1, q_heads, kv_heads, head_dim, starts, dtype, spare=70)
    scale = head_dim**-0.5
    out = attention_decode_triton(
        q, k_cache, v_cache, gate, start, scale, out=poisoned(*q.shape, dtype=dtype), n_splits=splits
    )
    assert_close(out, _sdpa_with_gate(q, k_cache, v_cache, gate, start, scale), dtype)

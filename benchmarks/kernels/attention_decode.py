"""Decode attention benchmark: one new token against a long KV cache (2 KV heads x 256)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from benchmarks.kernels.harness import Case
from benchmarks.kernels.shapes import DECODE_CONTEXTS, HEAD_DIM, KV_HEADS, Q_HEADS
from kernels.ops.attention_decode import attention_decode_triton
from kernels.reference.attention import attention


def _sdpa_flash(q_grouped, k, v, gate, scale):
    """Peer: the query heads of a KV group as rows of one flash call (no mask: every key is visible)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(q_grouped, k, v, scale=scale)
    return out * torch.sigmoid(gate)


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    scale = HEAD_DIM**-0.5
    group = Q_HEADS // KV_HEADS
    for context in DECODE_CONTEXTS[:3] if quick else DECODE_CONTEXTS:
        q = torch.randn(1, 1, Q_HEADS, HEAD_DIM, device=device, dtype=dtype)
        gate = torch.randn_like(q)
        k_cache = torch.randn(1, KV_HEADS, context, HEAD_DIM, device=device, dtype=dtype)
        v_cache = torch.randn_like(k_cache)
        start = torch.tensor([context - 1], device=device)
        q_grouped = q.view(1, KV_HEADS, group, HEAD_DIM)
        gate_grouped = gate.view(1, KV_HEADS, group, HEAD_DIM)
        impls = {
            "triton": lambda q=q, k=k_cache, v=v_cache, g=gate, s=start: attention_decode_triton(
                q, k, v, g, s, scale
            ),
            "sdpa flash": lambda q=q_grouped, k=k_cache, v=v_cache, g=gate_grouped: _sdpa_flash(
                q, k, v, g, scale
            ),
            "torch eager": lambda q=q, k=k_cache, v=v_cache, g=gate, s=start: attention(q, k, v, g, s, scale),
        }
        kv_bytes = 2 * k_cache.numel() * k_cache.element_size()
        flops = 4 * Q_HEADS * HEAD_DIM * context
        yield Case("attention decode", f"context={context}", kv_bytes, flops, impls, baseline="sdpa flash")

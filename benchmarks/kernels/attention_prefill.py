"""Prefill attention benchmark: agent turns over a cached prefix and long prompts, 8 q / 2 kv heads x 256."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from benchmarks.kernels.harness import Case
from benchmarks.kernels.shapes import HEAD_DIM, KV_HEADS, PREFILL_TURNS, Q_HEADS, QUICK_PREFILL_TURNS
from kernels.ops.attention_prefill import attention_prefill_triton
from kernels.reference.attention import attention

# The masked eager reference materialises a [tokens x keys] mask: leave it out of the longest prompts.
EAGER_MAX_SCORES = 4096 * 8192 + 1


def _sdpa_flash(q, k, v, gate, scale):
    """Peer: SDPA restricted to the flash backend, bottom-right causal, then the gate as a separate op."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(q.shape[2], k.shape[2])
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out * torch.sigmoid(gate)


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    scale = HEAD_DIM**-0.5
    group = Q_HEADS // KV_HEADS
    for new_tokens, prefix in QUICK_PREFILL_TURNS if quick else PREFILL_TURNS:
        total = prefix + new_tokens
        q = torch.randn(1, new_tokens, Q_HEADS, HEAD_DIM, device=device, dtype=dtype)
        gate = torch.randn_like(q)
        k_cache = torch.randn(1, KV_HEADS, total, HEAD_DIM, device=device, dtype=dtype)
        v_cache = torch.randn_like(k_cache)
        start = torch.tensor([prefix], device=device)
        # The peer gets head-major tensors and the KV heads repeated ahead of time (not timed).
        q_hm, gate_hm = q.transpose(1, 2).contiguous(), gate.transpose(1, 2).contiguous()
        k_rep = k_cache.repeat_interleave(group, dim=1)
        v_rep = v_cache.repeat_interleave(group, dim=1)
        impls = {
            "triton": lambda q=q, k=k_cache, v=v_cache, g=gate, s=start: attention_prefill_triton(
                q, k, v, g, s, scale
            ),
            "sdpa flash": lambda q=q_hm, k=k_rep, v=v_rep, g=gate_hm: _sdpa_flash(q, k, v, g, scale),
        }
        if new_tokens * total < EAGER_MAX_SCORES:
            impls["torch eager"] = lambda q=q, k=k_cache, v=v_cache, g=gate, s=start: attention(
                q, k, v, g, s, scale
            )
        flops = 4 * Q_HEADS * HEAD_DIM * (new_tokens * prefix + new_tokens * (new_tokens + 1) / 2)
        io = (2 * q.numel() * 2 + 2 * KV_HEADS * total * HEAD_DIM) * q.element_size()
        yield Case(
            "attention prefill", f"T={new_tokens} prefix={prefix}", io, flops, impls, baseline="sdpa flash"
        )

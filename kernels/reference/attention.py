"""Causal GQA attention of new queries over a KV cache, with the sigmoid output gate, in plain PyTorch."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    gate: torch.Tensor,
    start: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Query t of row b attends to keys [0, start[b] + t]; returns attn * sigmoid(gate) as [B, T, Hq, D].

    It reads no value back to the host, so that a CUDA graph (or its CPU stand-in) can hold it: it attends over
    the whole cache it is given under a mask built on the device. A caller that knows the longest row on the
    host passes a cache cut after it (ModelCache.prefix), and so reads no more than that.
    """
    batch, new_tokens, q_heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    group = q_heads // kv_heads
    start = start.to(device=q.device, dtype=torch.long)
    kv_len = k_cache.shape[2]
    # Queries of one KV group are stacked along the sequence axis so the cache is never repeated per head.
    qg = q.float().permute(0, 2, 1, 3).reshape(batch, kv_heads, group * new_tokens, head_dim)
    keys = k_cache.float()
    values = v_cache.float()
    out = F.scaled_dot_product_attention(
        qg, keys, values, attn_mask=_mask(start, new_tokens, group, kv_len), scale=scale
    )
    out = out.reshape(batch, q_heads, new_tokens, head_dim).permute(0, 2, 1, 3)
    return (out * torch.sigmoid(gate.float())).to(q.dtype)


def _mask(start: torch.Tensor, new_tokens: int, group: int, kv_len: int) -> torch.Tensor:
    """The visibility mask [B, 1, group * T, S] for SDPA (query t of row b sees keys up to start[b] + t)."""
    batch = start.shape[0]
    positions = torch.arange(kv_len, device=start.device)
    if new_tokens == 1:
        # One query per row: a [B, 1, 1, S] mask broadcasts over heads and the stacked group.
        return (positions <= start[:, None])[:, None, None, :]
    query_pos = start[:, None] + torch.arange(new_tokens, device=start.device)  # [B, T]
    visible = positions[None, None, :] <= query_pos[:, :, None]  # [B, T, S]
    return visible[:, None].repeat(1, 1, group, 1).reshape(batch, 1, group * new_tokens, kv_len)

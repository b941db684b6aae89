"""Partial rotary position embedding (rotate_half style) in plain PyTorch."""

from __future__ import annotations

import torch


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate the first 2 * len(inv_freq) dims of x [B, T, H, D] by the angles positions [B, T] * inv_freq."""
    rotary_dim = 2 * inv_freq.shape[0]
    freqs = positions.float()[:, :, None, None] * inv_freq.float()  # [B, T, 1, R/2], broadcast over heads
    cos, sin = freqs.cos(), freqs.sin()
    half = rotary_dim // 2
    x1, x2, rest = x.float().split((half, half, x.shape[-1] - rotary_dim), dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1).to(x.dtype)

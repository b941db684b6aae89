"""RMSNorm in plain PyTorch: zero-centred (1 + w) or plain weight, with an optional residual add first."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    zero_centered: bool = True,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Normalise the last dim in fp32 and cast after the weight multiply; with `residual`, return (norm(h), h)."""
    if residual is not None:
        # The sum is rounded to the activation dtype before the norm reads it, as an unfused model does.
        h = x + residual
        return rms_norm(h, weight, eps, zero_centered=zero_centered), h
    # One aten call for x * rsqrt(mean(x^2) + eps), the same arithmetic with less per-op overhead.
    y = F.rms_norm(x.float(), x.shape[-1:], eps=eps)
    w = weight.float()
    y = y * (1.0 + w) if zero_centered else y * w
    return y.to(x.dtype)

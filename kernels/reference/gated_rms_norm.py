"""Gated RMSNorm of the Gated DeltaNet output in plain PyTorch: w * rmsnorm(x) * silu(z)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise the last dim of x in fp32, multiply by the plain weight and silu(z), store in x.dtype."""
    y = F.rms_norm(x.float(), x.shape[-1:], eps=eps)
    return (weight.float() * y * F.silu(z.float())).to(x.dtype)

"""Causal depthwise conv1d with a rolling input state, followed by SiLU, in plain PyTorch."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor) -> torch.Tensor:
    """silu(conv) of x [B, T, C] with weight [C, K], the K-1 previous inputs read from and written to conv_state."""
    if x.shape[1] == 1:
        return _conv_step(x, weight, conv_state)
    channels, width = weight.shape
    history = width - 1
    inputs = torch.cat((conv_state.to(x.dtype), x.transpose(1, 2)), dim=-1)  # [B, C, K-1+T]
    out = F.conv1d(inputs.float(), weight.float().unsqueeze(1), groups=channels)  # [B, C, T]
    conv_state.copy_(inputs[:, :, inputs.shape[-1] - history :])
    return F.silu(out).transpose(1, 2).to(x.dtype).contiguous()


def _conv_step(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor) -> torch.Tensor:
    """One token: a multiply-sum over the K-input window (a conv call costs far more at this size)."""
    window = torch.cat((conv_state.to(x.dtype), x.transpose(1, 2)), dim=-1)  # [B, C, K]
    conv_state.copy_(window[:, :, 1:])
    out = (window.float() * weight.float()).sum(-1, keepdim=True)  # [B, C, 1]
    return F.silu(out, inplace=True).transpose(1, 2).to(x.dtype)

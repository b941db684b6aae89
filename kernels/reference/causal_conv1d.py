"""Causal depthwise conv1d with a rolling input state, followed by SiLU, in plain PyTorch."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, trail: torch.Tensor | None = None
) -> torch.Tensor:
    """silu(conv) of x [B, T, C] with weight [C, K], the K-1 previous inputs read from and written to conv_state.

    trail [B, T, C, K-1], when given, receives the state after each token, each token run as one decode step.
    """
    if trail is not None:
        outputs = []
        for t in range(x.shape[1]):
            outputs.append(_conv_step(x[:, t : t + 1], weight, conv_state))
            trail[:, t].copy_(conv_state)
        return torch.cat(outputs, dim=1)
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

"""SwiGLU activation in plain PyTorch: silu(gate) * up."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up computed in fp32, stored in gate.dtype."""
    return F.silu(gate.float()).mul_(up).to(gate.dtype)

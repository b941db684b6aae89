"""x @ weight.T and embedding lookups for every kind of weight the model holds: a plain tensor (GPU) or a CpuWeight
(CPU: bf16, int8, int4 or int6 in the layouts of the C++ products)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model.cpu_weights import CpuWeight, cpu_linear

Weight = torch.Tensor | CpuWeight


def linear(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    """x @ weight.T, in x's dtype."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight)
    return cpu_linear(x, weight)


def embedding(tokens: torch.Tensor, weight: Weight, dtype: torch.dtype) -> torch.Tensor:
    """The rows of weight for tokens, in dtype."""
    if isinstance(weight, torch.Tensor):
        return F.embedding(tokens, weight).to(dtype)
    return weight.embedding(tokens, dtype)

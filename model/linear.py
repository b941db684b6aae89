"""x @ weight.T for every kind of weight the model holds: plain, int8 (int8_weights) or packed (packed_weights)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model.int8_weights import Int8Weight, int8_linear
from model.packed_weights import PackedWeight, packed_linear

Weight = torch.Tensor | Int8Weight | PackedWeight


def linear(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    """x @ weight.T, in x's dtype."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight)
    if isinstance(weight, Int8Weight):
        return int8_linear(x, weight)
    return packed_linear(x, weight)

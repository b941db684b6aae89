"""Settings shared by the prefill and decode attention kernels."""

from __future__ import annotations

import math

import torch

from kernels.backend import interpreting

LOG2_E = 1.0 / math.log(2.0)


def dot_settings(dtype: torch.dtype) -> tuple[bool, str]:
    """(low_precision_dot, dot input precision) for tiles stored in `dtype`.

    bf16/fp16 tiles feed tensor-core dots on a GPU; the interpreter cannot do bf16 arithmetic, so there they are
    widened to fp32 first; fp32 storage gets IEEE fp32 dots so it matches the reference closely.
    """
    low_precision = dtype in (torch.bfloat16, torch.float16) and not interpreting()
    return low_precision, "tf32" if low_precision else "ieee"

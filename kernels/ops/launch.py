"""Launch settings shared by the row-wise Triton kernels."""

from __future__ import annotations

import torch
import triton

from kernels.checks import check_last_dim_contiguous, check_shape

MAX_ROW_BLOCK = 65536


def row_block(n_cols: int) -> tuple[int, int]:
    """(block, num_warps) for a kernel that holds one whole row of n_cols elements in registers."""
    block = triton.next_power_of_2(n_cols)
    if block > MAX_ROW_BLOCK:
        raise ValueError(
            f"rows of {n_cols} elements exceed the {MAX_ROW_BLOCK}-element limit of the row kernels"
        )
    num_warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    return block, num_warps


def as_rows(name: str, t: torch.Tensor) -> torch.Tensor:
    """A [rows, cols] view of t (a copy only when the leading dims cannot merge) with a unit last stride."""
    check_last_dim_contiguous(name, t)
    return t.reshape(-1, t.shape[-1])


def output_like(x: torch.Tensor, out: torch.Tensor | None, name: str = "out") -> torch.Tensor:
    """A new contiguous tensor shaped like x, or the caller's `out` after checking it fits."""
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    check_shape(name, out, tuple(x.shape), "the input's shape")
    if not out.is_contiguous() or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{name} must be contiguous with dtype {x.dtype} on {x.device}")
    return out

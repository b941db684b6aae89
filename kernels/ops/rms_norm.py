"""RMSNorm in Triton: zero-centred or plain weight, optionally fused with the residual add before it."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops import launch


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    residual_out_ptr,
    n_cols,
    x_row_stride,
    residual_row_stride,
    eps,
    ZERO_CENTERED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        h = x.to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * n_cols + cols, h, mask=mask)
        # Normalise the stored (rounded) sum, exactly what an unfused add then norm would read back.
        x = h.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if ZERO_CENTERED:
        w += 1.0
    tl.store(out_ptr + row * n_cols + cols, (x * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    zero_centered: bool = True,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Launch RMSNorm over the last dim; with residual returns (norm(x + residual), x + residual)."""
    rows = launch.as_rows("x", x)
    n_rows, n_cols = rows.shape
    out = launch.output_like(x, out)
    res_rows = launch.as_rows("residual", residual) if residual is not None else rows
    res_out = launch.output_like(x, residual_out, "residual_out") if residual is not None else out
    if n_rows:
        launch.run(
            _rms_norm_kernel,
            (n_rows,),
            (rows, res_rows, weight, out, res_out, n_cols, rows.stride(0), res_rows.stride(0), eps),
            {"ZERO_CENTERED": zero_centered, "HAS_RESIDUAL": residual is not None},
            launch.row_config(n_cols),
        )
    return (out, res_out) if residual is not None else out

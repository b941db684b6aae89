"""Gated RMSNorm in Triton: weight * rmsnorm(x) * silu(z), the Gated DeltaNet output norm."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops import launch


@triton.jit
def _gated_rms_norm_kernel(
    x_ptr, z_ptr, weight_ptr, out_ptr, n_cols, x_row_stride, z_row_stride, eps, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + row * z_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = w * x * inv_rms * z * tl.sigmoid(z)
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def gated_rms_norm_triton(
    x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Launch the gated RMSNorm over the last dim of x and z."""
    x_rows, z_rows = launch.as_rows("x", x), launch.as_rows("z", z)
    n_rows, n_cols = x_rows.shape
    out = launch.output_like(x, out)
    if n_rows:
        launch.run(
            _gated_rms_norm_kernel,
            (n_rows,),
            (x_rows, z_rows, weight, out, n_cols, x_rows.stride(0), z_rows.stride(0), eps),
            {},
            launch.row_config(n_cols),
        )
    return out

"""SwiGLU in Triton: silu(gate) * up in one pass over both inputs."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops import launch


@triton.jit
def _swiglu_kernel(gate_ptr, up_ptr, out_ptr, n_cols, gate_row_stride, up_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(
        out_ptr + row * n_cols + cols, (gate * tl.sigmoid(gate) * up).to(out_ptr.dtype.element_ty), mask=mask
    )


def swiglu_triton(gate: torch.Tensor, up: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch silu(gate) * up; gate and up may be strided row views (e.g. halves of a fused projection)."""
    gate_rows, up_rows = launch.as_rows("gate", gate), launch.as_rows("up", up)
    n_rows, n_cols = gate_rows.shape
    out = launch.output_like(gate, out)
    if n_rows and n_cols:
        config = launch.swiglu_config()
        launch.run(
            _swiglu_kernel,
            (n_rows, triton.cdiv(n_cols, config.kwargs["BLOCK"])),
            (gate_rows, up_rows, out, n_cols, gate_rows.stride(0), up_rows.stride(0)),
            {},
            config,
        )
    return out

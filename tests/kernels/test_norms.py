"""RMSNorm, gated RMSNorm and SwiGLU kernels against their torch references."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.ops.gated_rms_norm import gated_rms_norm_triton
from kernels.ops.rms_norm import rms_norm_triton
from kernels.ops.swiglu import swiglu_triton
from kernels.reference.gated_rms_norm import gated_rms_norm
from kernels.reference.rms_norm import rms_norm
from kernels.reference.swiglu import swiglu
from tests.kernels.common import DTYPES, assert_close, poisoned, randn

SHAPES = [(1, 64), (5, 100), (2, 3, 257)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("zero_centered", [True, False])
def test_rms_norm(shape, dtype, zero_centered):
    x, weight = randn(*shape, dtype=dtype), randn(shape[-1], dtype=dtype, scale=0.1)
    out = rms_norm_triton(x, weight, 1e-6, zero_centered=zero_centered, out=poisoned(*shape, dtype=dtype))
    assert_close(out, rms_norm(x, weight, 1e-6, zero_centered=zero_centered), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_fused_residual(shape, dtype):
    x, residual, weight = (
        randn(*shape, dtype=dtype),
        randn(*shape, dtype=dtype),
        randn(shape[-1], dtype=dtype),
    )
    out, h = rms_norm_triton(
        x,
        weight,
        1e-6,
        residual=residual,
        out=poisoned(*shape, dtype=dtype),
        residual_out=poisoned(*shape, dtype=dtype),
    )
    expected_out, expected_h = rms_norm(x, weight, 1e-6, residual=residual)
    assert_close(h, expected_h, dtype)
    assert_close(out, expected_out, dtype)


def test_rms_norm_reads_strided_rows():
    # The query half of a fused [query | gate] projection: rows two head_dims apart.
    fused = randn(3, 4, 2 * 48)
    query = fused[..., :48]
    weight = randn(48, scale=0.1)
    assert_close(rms_norm_triton(query, weight, 1e-6), rms_norm(query, weight, 1e-6), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 64), (7, 130)])
def test_gated_rms_norm(shape, dtype):
    x, z = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype)
    weight = (1 + randn(shape[-1], scale=0.1)).to(dtype)
    out = gated_rms_norm_triton(x, z, weight, 1e-6, out=poisoned(*shape, dtype=dtype))
    assert_close(out, gated_rms_norm(x, z, weight, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 96), (3, 1500), (2, 2, 33)])
def test_swiglu(shape, dtype):
    gate, up = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype)
    out = swiglu_triton(gate, up, out=poisoned(*shape, dtype=dtype))
    assert_close(out, swiglu(gate, up), dtype)


def test_forced_backend_routes_entry_points_to_triton(monkeypatch):
    calls = []
    import kernels.ops.swiglu as swiglu_module

    original = swiglu_module.swiglu_triton
    monkeypatch.setattr(swiglu_module, "swiglu_triton", lambda *a, **k: calls.append(1) or original(*a, **k))
    gate, up = randn(2, 16), randn(2, 16)
    kernels.set_backend("triton")
    try:
        out = kernels.swiglu(gate, up)
    finally:
        kernels.set_backend("auto")
    assert calls == [1]
    assert_close(out, swiglu(gate, up), torch.float32)


def test_unknown_backend_and_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="triton, torch"):
        kernels.set_backend("cuda")
    with pytest.raises(ValueError, match=r"weight must have shape \[hidden\]"):
        kernels.rms_norm(randn(2, 8), randn(9), 1e-6)

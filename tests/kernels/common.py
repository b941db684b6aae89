"""Device, dtypes, tolerances and NaN-poisoned outputs shared by the kernel tests."""

from __future__ import annotations

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.bfloat16)

# bf16 storage: kernel and reference each round once to bf16 (the interpreter truncates), so ~2 ulp apart.
TOLERANCES = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
}


def randn(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE) * scale).to(dtype)


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """An output buffer full of NaN, so any element the kernel fails to write fails the comparison."""
    return torch.full(shape, float("nan"), device=DEVICE, dtype=dtype)


def assert_close(
    actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0
) -> None:
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(
        actual.float(), expected.float(), rtol=tol["rtol"], atol=tol["atol"] * scale, equal_nan=False
    )

"""The rotary embedding kernel against its torch reference."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.rotary import rotary_embedding_triton
from kernels.reference.rotary import rotary_embedding
from tests.kernels.common import DEVICE, DTYPES, assert_close, poisoned, randn


def _inv_freq(rotary_dim: int) -> torch.Tensor:
    return 1.0 / (1e7 ** (torch.arange(0, rotary_dim, 2, device=DEVICE).float() / rotary_dim))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("shape", "rotary_dim"), [((1, 1, 2, 64), 16), ((2, 5, 3, 48), 48), ((2, 3, 8, 256), 64)]
)
def test_rotary(shape, rotary_dim, dtype):
    batch, seq_len = shape[:2]
    x = randn(*shape, dtype=dtype)
    # Positions deep into a long context: angles of tens of thousands of radians.
    positions = torch.randint(0, 60_000, (batch, 1), device=DEVICE) + torch.arange(seq_len, device=DEVICE)
    inv_freq = _inv_freq(rotary_dim)
    out = rotary_embedding_triton(x, positions, inv_freq, out=poisoned(*shape, dtype=dtype))
    assert_close(out, rotary_embedding(x, positions, inv_freq), dtype)


def test_rotary_reads_strided_heads():
    fused = randn(2, 3, 4, 2 * 32)
    query = fused[..., :32]
    positions = torch.arange(3, device=DEVICE).expand(2, 3)
    inv_freq = _inv_freq(16)
    assert_close(
        rotary_embedding_triton(query, positions, inv_freq),
        rotary_embedding(query, positions, inv_freq),
        torch.float32,
    )

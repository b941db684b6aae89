"""The causal depthwise conv1d kernel (prefill and one-token update) against its torch reference."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.causal_conv1d import causal_conv1d_triton
from kernels.reference.causal_conv1d import causal_conv1d
from tests.kernels.common import DTYPES, assert_close, poisoned, randn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("batch", "tokens", "channels", "width"), [(1, 1, 40, 4), (2, 2, 130, 4), (2, 37, 96, 4), (1, 5, 16, 2)]
)
def test_causal_conv1d(batch, tokens, channels, width, dtype):
    x = randn(batch, tokens, channels, dtype=dtype)
    weight = randn(channels, width, dtype=dtype)
    state = randn(batch, channels, width - 1, dtype=dtype)
    expected_state = state.clone()
    expected = causal_conv1d(x, weight, expected_state)
    out = causal_conv1d_triton(x, weight, state, out=poisoned(batch, tokens, channels, dtype=dtype))
    assert_close(out, expected, dtype)
    torch.testing.assert_close(state, expected_state, rtol=0, atol=0)


def test_prefill_then_steps_equal_one_pass():
    x, weight = randn(2, 12, 24), randn(24, 4)
    state, stepped_state = torch.zeros_like(randn(2, 24, 3)), torch.zeros(2, 24, 3, device=x.device)
    whole = causal_conv1d_triton(x, weight, state)
    pieces = [causal_conv1d_triton(x[:, :9], weight, stepped_state)]
    pieces += [causal_conv1d_triton(x[:, t : t + 1], weight, stepped_state) for t in range(9, 12)]
    assert_close(torch.cat(pieces, dim=1), whole, torch.float32)
    torch.testing.assert_close(stepped_state, state, rtol=0, atol=0)


def test_reads_strided_input():
    fused = randn(1, 7, 2 * 32)
    x = fused[..., :32]
    weight, state = randn(32, 4), randn(1, 32, 3)
    expected_state = state.clone()
    assert_close(
        causal_conv1d_triton(x, weight, state), causal_conv1d(x, weight, expected_state), torch.float32
    )
    torch.testing.assert_close(state, expected_state, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("batch", "tokens", "channels", "width"), [(1, 1, 40, 4), (2, 5, 130, 4), (3, 9, 16, 2)]
)
def test_trail_holds_the_state_after_each_token(batch, tokens, channels, width, dtype):
    x = randn(batch, tokens, channels, dtype=dtype)
    weight = randn(channels, width, dtype=dtype)
    state = randn(batch, channels, width - 1, dtype=dtype)
    stepped = state.clone()
    expected_trail = []
    for t in range(tokens):
        causal_conv1d(x[:, t : t + 1], weight, stepped)
        expected_trail.append(stepped.clone())
    reference_state, reference_trail = (
        state.clone(),
        poisoned(batch, tokens, channels, width - 1, dtype=dtype),
    )
    expected = causal_conv1d(x, weight, reference_state, reference_trail)
    trail = poisoned(batch, tokens, channels, width - 1, dtype=dtype)
    out = causal_conv1d_triton(
        x, weight, state, out=poisoned(batch, tokens, channels, dtype=dtype), trail=trail
    )
    torch.testing.assert_close(reference_trail, torch.stack(expected_trail, dim=1), rtol=0, atol=0)
    torch.testing.assert_close(trail, reference_trail, rtol=0, atol=0)
    torch.testing.assert_close(state, reference_state, rtol=0, atol=0)
    assert_close(out, expected, dtype)

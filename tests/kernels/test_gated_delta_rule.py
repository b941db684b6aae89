"""Gated delta rule kernels: chunked vs fused recurrent vs the naive token loop, from a non-zero state."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.gated_delta_rule import (
    gated_delta_rule_chunk_triton,
    gated_delta_rule_recurrent_triton,
    gated_delta_rule_triton,
)
from kernels.reference.gated_delta_rule import gated_delta_rule, prepare, recurrent
from tests.kernels.common import DEVICE, DTYPES, assert_close, poisoned, randn


def _inputs(batch, length, key_heads, value_heads, key_dim, value_dim, dtype):
    # Keys share a direction and decay is slow, so far-apart tokens interact through the UT transform.
    shared = randn(1, 1, key_heads, key_dim)
    q = randn(batch, length, key_heads, key_dim, dtype=dtype)
    k = (randn(batch, length, key_heads, key_dim) + shared).to(dtype)
    v = randn(batch, length, value_heads, value_dim, dtype=dtype)
    a = randn(batch, length, value_heads, dtype=dtype)
    b = randn(batch, length, value_heads, dtype=dtype)
    A_log = torch.rand(value_heads, device=DEVICE).mul(0.1).add(0.01).log()
    dt_bias = torch.rand(value_heads, device=DEVICE)
    state = torch.randn(batch, value_heads, key_dim, value_dim, device=DEVICE) * 0.2
    return q, k, v, a, b, A_log, dt_bias, state


def _naive(q, k, v, a, b, A_log, dt_bias, state):
    """The token loop of the reference, independent of the chunked algebra."""
    out, final = recurrent(*prepare(q, k, v, a, b, A_log, dt_bias), state.clone())
    return out.transpose(1, 2), final


CASES = [
    # batch, tokens, key heads, value heads, key dim, value dim
    (1, 64, 1, 1, 16, 16),
    (2, 70, 1, 2, 32, 16),
    (1, 130, 2, 2, 16, 16),
]


# Slow (left out of the fast tier): three chunked kernels over 64-130 tokens in the Triton interpreter.
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_chunked_matches_fused_recurrent_and_token_loop(case, dtype):
    q, k, v, a, b, A_log, dt_bias, state = _inputs(*case, dtype=dtype)
    expected, expected_state = _naive(q, k, v, a, b, A_log, dt_bias, state)
    recurrent_state = state.clone()
    out = gated_delta_rule_chunk_triton(
        q, k, v, a, b, A_log, dt_bias, state, out=poisoned(*v.shape, dtype=dtype)
    )
    out_recurrent = gated_delta_rule_recurrent_triton(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    assert_close(out, expected, dtype)
    assert_close(out, out_recurrent, dtype)
    assert_close(state, expected_state, dtype)
    assert_close(state, recurrent_state, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [(1, 1, 1, 1, 16, 16), (3, 1, 2, 4, 32, 16), (2, 9, 1, 2, 16, 32)])
def test_fused_recurrent_matches_token_loop(case, dtype):
    q, k, v, a, b, A_log, dt_bias, state = _inputs(*case, dtype=dtype)
    expected, expected_state = _naive(q, k, v, a, b, A_log, dt_bias, state)
    out = gated_delta_rule_recurrent_triton(
        q, k, v, a, b, A_log, dt_bias, state, out=poisoned(*v.shape, dtype=dtype)
    )
    assert_close(out, expected, dtype)
    assert_close(state, expected_state, dtype)


def test_chunked_prefill_then_recurrent_decode_matches_reference():
    q, k, v, a, b, A_log, dt_bias, state = _inputs(2, 40, 1, 2, 16, 16, torch.float32)
    ref_state = state.clone()
    for lo, hi in ((0, 37), (37, 38), (38, 40)):
        piece = [t[:, lo:hi] for t in (q, k, v, a, b)]
        out = gated_delta_rule_triton(*piece, A_log, dt_bias, state)
        expected = gated_delta_rule(*piece, A_log, dt_bias, ref_state)
        assert_close(out, expected, torch.float32)
    assert_close(state, ref_state, torch.float32)


def test_reads_q_k_v_as_views_of_one_projection():
    # The conv output [B, T, 2*Hk*dk + Hv*dv] is split into q, k, v views without copies.
    batch, length, key_dim = 1, 20, 16
    mixed = randn(batch, length, 3 * key_dim)
    q, k, v = (mixed[..., i * key_dim : (i + 1) * key_dim].unflatten(-1, (1, key_dim)) for i in range(3))
    _, _, _, _, _, A_log, dt_bias, state = _inputs(batch, length, 1, 1, key_dim, key_dim, torch.float32)
    # a and b as columns of wider projections, with token strides that differ from each other.
    a, b = randn(batch, length, 5)[..., 3:4], randn(batch, length, 7)[..., 6:7]
    expected, _ = _naive(q, k, v, a, b, A_log, dt_bias, state)
    recurrent_state = state.clone()
    out = gated_delta_rule_chunk_triton(q, k, v, a, b, A_log, dt_bias, state)
    assert_close(out, expected, torch.float32)
    out = gated_delta_rule_recurrent_triton(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    assert_close(out, expected, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [(1, 1, 1, 1, 16, 16), (2, 5, 1, 2, 32, 16), (3, 9, 2, 4, 16, 32)])
def test_trail_holds_the_state_after_each_token(case, dtype):
    q, k, v, a, b, A_log, dt_bias, state = _inputs(*case, dtype=dtype)
    batch, tokens = case[:2]
    stepped = state.clone()
    expected_trail = []
    for t in range(tokens):
        token = slice(t, t + 1)
        gated_delta_rule(
            q[:, token], k[:, token], v[:, token], a[:, token], b[:, token], A_log, dt_bias, stepped
        )
        expected_trail.append(stepped.clone())
    expected_trail = torch.stack(expected_trail, dim=1)
    expected, _ = _naive(q, k, v, a, b, A_log, dt_bias, state)
    reference_state = state.clone()
    reference_trail = poisoned(*expected_trail.shape, dtype=torch.float32)
    reference = gated_delta_rule(q, k, v, a, b, A_log, dt_bias, reference_state, reference_trail)
    # The reference's trail runs each token as the decode step does: the very same states.
    torch.testing.assert_close(reference_trail, expected_trail, rtol=0, atol=0)
    trail = poisoned(*expected_trail.shape, dtype=torch.float32)
    out = gated_delta_rule_triton(q, k, v, a, b, A_log, dt_bias, state, trail=trail)
    assert_close(out, expected.to(dtype), dtype)
    assert_close(reference, expected.to(dtype), dtype)
    assert_close(trail, expected_trail, torch.float32)
    torch.testing.assert_close(state, trail[:, -1], rtol=0, atol=0)

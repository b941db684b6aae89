"""The public entry points: the Triton and torch backends agree through the same calls, and bad input is refused."""

from __future__ import annotations

import pytest
import torch

import kernels
from tests.kernels.common import DEVICE, assert_close, randn


@pytest.fixture
def both_backends():
    """Run a call under the forced Triton backend and the torch one; returns both results."""

    def run(call):
        results = []
        for backend in ("triton", "torch"):
            kernels.set_backend(backend)
            try:
                results.append(call())
            finally:
                kernels.set_backend("auto")
        return results

    return run


def test_norms_and_activation(both_backends):
    x, residual, z, w = randn(3, 40), randn(3, 40), randn(3, 40), randn(40)
    (y1, h1), (y2, h2) = both_backends(lambda: kernels.rms_norm(x, w, 1e-6, residual=residual))
    assert_close(y1, y2, torch.float32)
    assert_close(h1, h2, torch.float32)
    gated = both_backends(lambda: kernels.gated_rms_norm(x, z, w, 1e-6))
    assert_close(*gated, torch.float32)
    assert_close(*both_backends(lambda: kernels.swiglu(x, z)), torch.float32)


def test_rotary(both_backends):
    x = randn(2, 3, 2, 32)
    positions = torch.arange(6, device=DEVICE).view(2, 3)
    inv_freq = 1.0 / (1e4 ** (torch.arange(0, 16, 2, device=DEVICE).float() / 16))
    assert_close(*both_backends(lambda: kernels.rotary_embedding(x, positions, inv_freq)), torch.float32)


@pytest.mark.parametrize("new_tokens", [1, 6])
def test_attention_dispatches_decode_and_prefill(both_backends, new_tokens):
    q, gate = randn(2, new_tokens, 4, 32), randn(2, new_tokens, 4, 32)
    k_cache, v_cache = randn(2, 2, 30, 32), randn(2, 2, 30, 32)
    start = torch.tensor([5, 17], device=DEVICE)
    results = both_backends(lambda: kernels.attention(q, k_cache, v_cache, gate, start, 32**-0.5))
    assert_close(*results, torch.float32)


@pytest.mark.parametrize("new_tokens", [1, 5])
def test_conv_and_gated_delta_rule_update_states_alike(both_backends, new_tokens):
    x, weight = randn(2, new_tokens, 24), randn(24, 4)
    conv_states = [randn(2, 24, 3)]
    conv_states.append(conv_states[0].clone())
    conv_finals = list(conv_states)
    outputs = both_backends(lambda: kernels.causal_conv1d(x, weight, conv_states.pop()))
    assert_close(*outputs, torch.float32)
    assert_close(conv_finals[1], conv_finals[0], torch.float32)

    q, k, v = randn(2, new_tokens, 1, 16), randn(2, new_tokens, 1, 16), randn(2, new_tokens, 2, 16)
    a, b = randn(2, new_tokens, 2), randn(2, new_tokens, 2)
    A_log, dt_bias = torch.rand(2, device=DEVICE).log(), torch.rand(2, device=DEVICE)
    states = [randn(2, 2, 16, 16, scale=0.1)]
    states.append(states[0].clone())
    finals = list(states)
    outputs = both_backends(lambda: kernels.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, states.pop()))
    assert_close(*outputs, torch.float32)
    assert_close(finals[1], finals[0], torch.float32)


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="multiple of KV heads"):
        kernels.attention(randn(1, 2, 3, 8), randn(1, 2, 9, 8), randn(1, 2, 9, 8), randn(1, 2, 3, 8),
                          torch.tensor([0], device=DEVICE), 1.0)  # fmt: skip
    with pytest.raises(TypeError, match="state must be float32"):
        kernels.gated_delta_rule(
            randn(1, 2, 1, 16), randn(1, 2, 1, 16), randn(1, 2, 1, 16), randn(1, 2, 1), randn(1, 2, 1),
            randn(1), randn(1), randn(1, 1, 16, 16).double(),
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"conv_state must have shape \[B, C, K-1\]"):
        kernels.causal_conv1d(randn(1, 3, 8), randn(8, 4), randn(1, 8, 4))
    with pytest.raises(ValueError, match="contiguous last dimension"):
        kernels.set_backend("triton")
        try:
            kernels.swiglu(randn(4, 6).t(), randn(4, 6).t())
        finally:
            kernels.set_backend("auto")

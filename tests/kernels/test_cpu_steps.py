"""The fused C++ CPU steps of a decode token (kernels/cpu: gated_delta_step.cpp, attention_step.cpp) against their
torch references on fresh random inputs, outputs poisoned with NaN, states updated in place; and the entry points
sending one-token CPU calls to them."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels import cpu as cpu_kernels
from kernels.reference import attention as attention_ref
from kernels.reference import gated_delta_rule as gdn_ref

DTYPES = (torch.float32, torch.bfloat16)
# fp32 sums in another order; bf16 outputs each rounded once from fp32 values that close.
TOLERANCES = {torch.float32: 2e-5, torch.bfloat16: 1e-2}


@pytest.fixture(scope="module")
def ops():
    built = cpu_kernels.ops()
    assert built is not None, "the C++ CPU kernels did not build"
    return built


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert not got.isnan().any(), f"{what}: outputs left unwritten"
    error = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    assert error <= TOLERANCES[dtype], f"{what}: {error:.2e} of the largest magnitude"


def _gdn_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype, seed):
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    q, k = rand(batch, tokens, key_heads, key_dim), rand(batch, tokens, key_heads, key_dim)
    v = rand(batch, tokens, value_heads, value_dim)
    a, b = rand(batch, tokens, value_heads), rand(batch, tokens, value_heads)
    A_log = torch.rand(value_heads, generator=generator).mul(0.1).add(0.01).log()
    dt_bias = torch.rand(value_heads, generator=generator) * 30  # past softplus's threshold too
    state = torch.randn(batch, value_heads, key_dim, value_dim, generator=generator) * 0.2
    return q, k, v, a, b, A_log, dt_bias, state


# batch, key heads, value heads, key dim, value dim: Qwen3.5-2B's layer, then small and odd ones.
GDN_SHAPES = [(1, 16, 16, 128, 128), (3, 2, 4, 32, 16), (2, 1, 3, 20, 12)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GDN_SHAPES)
def test_gated_delta_step_matches_the_reference(ops, shape, dtype):
    batch, key_heads, value_heads, key_dim, value_dim = shape
    q, k, v, a, b, A_log, dt_bias, state = _gdn_inputs(
        batch, 1, key_heads, value_heads, key_dim, value_dim, dtype, seed=sum(shape)
    )
    want_state = state.clone()
    want = gdn_ref.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, want_state)
    out = torch.full_like(v, float("nan"))
    ops.gated_delta_step(q, k, v, a, b, A_log, dt_bias, state, out)
    _close(out, want, dtype, "output")
    _close(state, want_state, torch.float32, "state")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_verify_pass_keeps_each_tokens_state_as_one_token_steps_reach_it(dtype):
    """The entry point runs a trail's tokens through the same fused step as decode steps: the very same states."""
    q, k, v, a, b, A_log, dt_bias, state = _gdn_inputs(2, 5, 2, 4, 32, 16, dtype, seed=7)
    stepped = state.clone()
    expected_outputs, expected_trail = [], []
    for t in range(5):
        token = [x[:, t : t + 1] for x in (q, k, v, a, b)]
        expected_outputs.append(kernels.gated_delta_rule(*token, A_log, dt_bias, stepped))
        expected_trail.append(stepped.clone())
    trail = torch.full((2, 5, 4, 32, 16), float("nan"))
    out = kernels.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, state, trail)
    assert torch.equal(out, torch.cat(expected_outputs, dim=1))
    assert torch.equal(trail, torch.stack(expected_trail, dim=1)) and torch.equal(state, stepped)
    reference_state = _gdn_inputs(2, 5, 2, 4, 32, 16, dtype, seed=7)[-1]
    reference = gdn_ref.gated_delta_rule(
        q, k, v, a, b, A_log, dt_bias, reference_state, torch.empty_like(trail)
    )
    _close(out, reference, dtype, "verify pass against the reference")


def _attention_inputs(batch, q_heads, kv_heads, dim, positions, dtype, seed):
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    # Caches as the engine holds them: a prefix of a longer buffer, so positions are strided by head.
    k_cache = rand(batch, kv_heads, positions + 7, dim)[:, :, :positions]
    v_cache = rand(batch, kv_heads, positions + 7, dim)[:, :, :positions]
    return rand(batch, 1, q_heads, dim), k_cache, v_cache, rand(batch, 1, q_heads, dim)


# batch, query heads, KV heads, head dim, cache positions, each row's last visible position.
ATTENTION_CASES = [(1, 8, 2, 256, 2000, [1999]), (3, 4, 2, 32, 50, [0, 49, 20]), (2, 3, 1, 16, 9, [8, 3])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_step_matches_the_reference(ops, case, dtype):
    batch, q_heads, kv_heads, dim, positions, last = case
    q, k_cache, v_cache, gate = _attention_inputs(
        batch, q_heads, kv_heads, dim, positions, dtype, seed=positions
    )
    start = torch.tensor(last)
    scale = dim**-0.5
    want = attention_ref.attention(q, k_cache, v_cache, gate, start, scale)
    out = torch.full_like(q, float("nan"))
    ops.attention_step(q, k_cache, v_cache, gate, start, scale, out)
    _close(out, want, dtype, "attention")
    # Positions past a row's last visible one are never read: changing them changes nothing.
    k_cache[0, :, last[0] + 1 :] = float("nan")
    again = torch.full_like(q, float("nan"))
    ops.attention_step(q, k_cache, v_cache, gate, start, scale, again)
    assert torch.equal(again, out)


def test_one_token_cpu_calls_take_the_fused_steps(ops, monkeypatch):
    q, k, v, a, b, A_log, dt_bias, state = _gdn_inputs(1, 1, 1, 2, 16, 16, torch.float32, seed=3)
    seen = []

    class Recording:
        def __getattr__(self, name):
            seen.append(name)
            return getattr(ops, name)

    monkeypatch.setattr(kernels.cpu_kernels, "ops", Recording)
    kernels.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, state)
    query, k_cache, v_cache, gate = _attention_inputs(1, 2, 1, 16, 5, torch.float32, seed=4)
    kernels.attention(query, k_cache, v_cache, gate, torch.tensor([4]), 0.25)
    assert seen == ["gated_delta_step", "attention_step"]
    # A prefill's tokens take the chunked reference, a head size the fused attention cannot step its reference.
    q2, k2, v2, a2, b2, *_ = _gdn_inputs(1, 3, 1, 2, 16, 16, torch.float32, seed=5)
    kernels.gated_delta_rule(q2, k2, v2, a2, b2, A_log, dt_bias, state)
    kernels.attention(*_attention_inputs(1, 2, 1, 24, 5, torch.float32, seed=6), torch.tensor([4]), 0.2)
    assert seen == ["gated_delta_step", "attention_step"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda ops: ops.gated_delta_step(
                *_gdn_inputs(1, 1, 1, 2, 16, 16, torch.float32, 1)[:7],
                torch.zeros(1, 2, 16, 8),
                torch.empty(1, 1, 2, 16),
            ),
            "state must be",
        ),
        (
            lambda ops: ops.attention_step(
                *_attention_inputs(1, 2, 1, 24, 5, torch.float32, 1)[:4],
                torch.tensor([4]),
                0.2,
                torch.empty(1, 1, 2, 24),
            ),
            "multiple of 16",
        ),
        (
            lambda ops: ops.attention_step(
                *_attention_inputs(1, 2, 1, 16, 5, torch.float32, 1)[:4],
                torch.tensor([4], dtype=torch.int32),
                0.2,
                torch.empty(1, 1, 2, 16),
            ),
            "int64",
        ),
    ],
)
def test_bad_inputs_are_refused_with_a_message(ops, call, message):
    with pytest.raises(RuntimeError, match=message):
        call(ops)

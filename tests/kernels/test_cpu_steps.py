"""The C++ CPU kernels of a decode token (kernels/cpu: gated_delta_net_step.cpp, attention_inputs.cpp,
attention_step.cpp, rms_norm.cpp, swiglu.cpp) against their torch references on fresh random inputs, outputs poisoned with NaN, states updated in place; and the
entry points sending CPU calls to them."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels import cpu as cpu_kernels
from kernels.reference import attention as attention_ref
from kernels.reference import rms_norm as norm_ref
from tests.kernels.cpu_step_inputs import copies, layer_inputs, torch_reference, trails

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


# batch, key heads, value heads, key dim, value dim: Qwen3.5-2B's layer, a head wider than one panel of the delta
# rule's register sums, then small and odd ones.
GDN_SHAPES = [(1, 16, 16, 128, 128), (1, 2, 2, 32, 256), (3, 2, 4, 32, 16), (2, 1, 3, 20, 12)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GDN_SHAPES)
def test_gated_delta_net_step_matches_the_reference(ops, shape, dtype):
    args = layer_inputs(*shape[:1], 1, *shape[1:], dtype, seed=sum(shape))
    want_args = copies(args)
    with torch_reference():
        want = kernels.gated_delta_net(*want_args)
    out = torch.full_like(want, float("nan"))
    ops.gated_delta_net_step.out(*args, None, None, None, out)
    _close(out, want, dtype, "output")
    _close(args[2], want_args[2], dtype, "conv state")
    _close(args[5], want_args[5], torch.float32, "state")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_verify_pass_keeps_each_tokens_state_as_one_token_steps_reach_it(dtype):
    """The entry point runs a trail's tokens through the same fused step as decode steps: the very same states;
    rows sitting out keep theirs, in the states and in the trails."""
    args = layer_inputs(3, 5, 2, 4, 32, 16, dtype, seed=7)
    active = torch.tensor([True, False, True])
    stepped = copies(args)
    outputs, conv_trail, recurrent_trail = [], [], []
    for t in range(5):
        outputs.append(kernels.gated_delta_net(stepped[0][:, t : t + 1], *stepped[1:], active=active))
        conv_trail.append(stepped[2].clone())
        recurrent_trail.append(stepped[5].clone())
    reference_args = copies(args)
    conv, recurrent = trails(args, 5)
    out = kernels.gated_delta_net(*args, active=active, conv_trail=conv, recurrent_trail=recurrent)
    assert torch.equal(out, torch.cat(outputs, dim=1))
    assert torch.equal(conv, torch.stack(conv_trail, dim=1)) and torch.equal(args[2], stepped[2])
    assert torch.equal(recurrent, torch.stack(recurrent_trail, dim=1)) and torch.equal(args[5], stepped[5])
    resting = ~active
    assert torch.equal(args[5][resting], reference_args[5][resting])
    assert torch.equal(args[2][resting], reference_args[2][resting])
    conv_want, recurrent_want = trails(args, 5)
    with torch_reference():
        want = kernels.gated_delta_net(
            *reference_args, active=active, conv_trail=conv_want, recurrent_trail=recurrent_want
        )
    _close(out[active], want[active], dtype, "verify pass against the reference")
    _close(recurrent[active], recurrent_want[active], torch.float32, "state trail against the reference")
    _close(conv[active], conv_want[active], dtype, "conv trail against the reference")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "width"), [(1, 2048), (33, 64), (4, 7)])
def test_rms_norm_rows_match_the_reference(ops, dtype, rows, width):
    generator = torch.Generator().manual_seed(rows + width)
    x, residual = (torch.randn(rows, width, generator=generator).to(dtype) for _ in range(2))
    weight = torch.randn(width, generator=generator).to(dtype)
    for zero_centered in (True, False):
        want = norm_ref.rms_norm(x, weight, 1e-6, zero_centered=zero_centered)
        out = torch.full_like(x, float("nan"))
        ops.rms_norm_rows.out(x, weight, 1e-6, zero_centered, torch.empty(0), torch.empty(0), out)
        _close(out, want, dtype, "norm")
        want, want_sum = norm_ref.rms_norm(x, weight, 1e-6, zero_centered=zero_centered, residual=residual)
        total = torch.full_like(x, float("nan"))
        ops.rms_norm_rows.out(x, weight, 1e-6, zero_centered, residual, total, out)
        assert torch.equal(total, want_sum), "the sum is rounded once, as the reference rounds it"
        _close(out, want, dtype, "norm after the residual add")
    # A row's result is its own: normed alone or among others, the same bits.
    alone = torch.empty_like(x[:1])
    ops.rms_norm_rows.out(x[-1:].contiguous(), weight, 1e-6, True, torch.empty(0), torch.empty(0), alone)
    among = torch.empty_like(x)
    ops.rms_norm_rows.out(x, weight, 1e-6, True, torch.empty(0), torch.empty(0), among)
    assert torch.equal(alone[0], among[-1])


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
    ops.attention_step.out(q, k_cache, v_cache, gate, start, scale, out)
    _close(out, want, dtype, "attention")
    # Positions past a row's last visible one are never read: changing them changes nothing.
    k_cache[0, :, last[0] + 1 :] = float("nan")
    again = torch.full_like(q, float("nan"))
    ops.attention_step.out(q, k_cache, v_cache, gate, start, scale, again)
    assert torch.equal(again, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_of_a_verify_passs_positions_is_that_of_a_step_each(ops, dtype, monkeypatch):
    batch, q_heads, kv_heads, dim, positions, tokens = 3, 8, 2, 64, 300, 5
    generator = torch.Generator().manual_seed(11)
    q, gate = (torch.randn(batch, tokens, q_heads, dim, generator=generator).to(dtype) for _ in range(2))
    k_cache, v_cache = _attention_inputs(batch, q_heads, kv_heads, dim, positions, dtype, seed=12)[1:3]
    start = torch.tensor([0, 150, positions - tokens])
    scale = dim**-0.5
    out = torch.full_like(q, float("nan"))
    ops.attention_step.out(q, k_cache, v_cache, gate, start, scale, out)
    for t in range(tokens):
        step = torch.full_like(q[:, :1], float("nan"))
        bound = int(start.max()) + t + 1
        ops.attention_step.out(
            q[:, t : t + 1].contiguous(),
            k_cache[:, :, :bound],
            v_cache[:, :, :bound],
            gate[:, t : t + 1].contiguous(),
            start + t,
            scale,
            step,
        )
        assert torch.equal(out[:, t : t + 1], step), f"position {t}"
    # Position t sees the cache up to start + t, as causal attention over the pass does.
    _close(out, attention_ref.attention(q, k_cache, v_cache, gate, start, scale), dtype, "attention")
    bounds = [int(start.max()) + t + 1 for t in range(tokens)]
    assert torch.equal(kernels.attention_as_steps(q, k_cache, v_cache, gate, start, scale, bounds), out)
    # Without the fused step, the steps run one by one through the reference.
    monkeypatch.setattr(cpu_kernels, "ops", lambda: None)
    _close(
        kernels.attention_as_steps(q, k_cache, v_cache, gate, start, scale, bounds), out, dtype, "attention"
    )


def _projection(batch, tokens, q_heads, kv_heads, dim, half, cache_positions, dtype, seed):
    """A QKV projection's output, its norms, the tokens' positions (distinct within a row), the rotary frequencies
    and NaN-poisoned caches viewed as prefixes of longer buffers (kernels.attention_inputs' argument order)."""
    generator = torch.Generator().manual_seed(seed)
    projected = torch.randn(batch, tokens, (2 * q_heads + 2 * kv_heads) * dim, generator=generator).to(dtype)
    q_norm, k_norm = (torch.randn(dim, generator=generator).mul(0.3).to(dtype) for _ in range(2))
    positions = torch.stack(
        [torch.randperm(cache_positions, generator=generator)[:tokens] for _ in range(batch)]
    )
    inv_freq = 1.0 / 10000 ** (torch.arange(0, 2 * half, 2, dtype=torch.float32) / (2 * half))
    k_cache, v_cache = (
        torch.full((batch, kv_heads, cache_positions + 5, dim), float("nan"), dtype=dtype)[
            :, :, :cache_positions
        ]
        for _ in range(2)
    )
    return [projected, q_norm, k_norm, 1e-6, positions, inv_freq, k_cache, v_cache]


# batch, tokens, query heads, KV heads, head dim, rotated pairs, cache positions: Qwen3.5-2B's decode step and a
# prefill at its shapes, then small odd ones (a head dim no vector divides, rotation over the whole head).
ATTENTION_INPUT_CASES = [
    (1, 1, 8, 2, 256, 32, 2000),
    (1, 40, 8, 2, 256, 32, 64),
    (3, 2, 4, 2, 12, 3, 9),
    (2, 3, 3, 1, 8, 4, 5),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ATTENTION_INPUT_CASES)
def test_attention_inputs_match_the_reference(ops, case, dtype):
    args = _projection(*case, dtype, seed=sum(case))
    want_args = copies(args)
    with torch_reference():
        want_query, want_gate = kernels.attention_inputs(*want_args)
    query, gate = kernels.attention_inputs(*args)
    _close(query, want_query, dtype, "queries")
    assert torch.equal(gate, want_gate), "the gates are copied as they are"
    k_cache, v_cache, want_k, want_v = args[6], args[7], want_args[6], want_args[7]
    written = ~want_k.isnan()
    assert torch.equal(~k_cache.isnan(), written) and torch.equal(~v_cache.isnan(), written), (
        "exactly the tokens' positions are written"
    )
    _close(k_cache[written], want_k[written], dtype, "keys")
    assert torch.equal(v_cache[written], want_v[written]), "the values are copied as they are"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 6144), (2, 5, 37), (3, 16)])
def test_swiglu_rows_match_the_reference(ops, shape, dtype):
    generator = torch.Generator().manual_seed(sum(shape))
    # The MLP's halves, as its projection leaves them: views whose rows lie a whole projection apart.
    gate, up = (torch.randn(*shape[:-1], 2 * shape[-1], generator=generator) * 4).to(dtype).chunk(2, dim=-1)
    with torch_reference():
        want = kernels.swiglu(gate, up)
    got = kernels.swiglu(gate, up)
    assert got.shape == want.shape and got.is_contiguous()
    _close(got, want, dtype, "swiglu")


def test_cpu_calls_take_the_fused_steps(ops, monkeypatch):
    args = layer_inputs(1, 1, 1, 2, 16, 16, torch.float32, seed=3)
    seen = []

    class Recording:
        def __getattr__(self, name):
            seen.append(name)
            return getattr(ops, name)

    monkeypatch.setattr(kernels.cpu_kernels, "ops", Recording)
    kernels.gated_delta_net(*args)
    query, k_cache, v_cache, gate = _attention_inputs(1, 2, 1, 16, 5, torch.float32, seed=4)
    kernels.attention(query, k_cache, v_cache, gate, torch.tensor([4]), 0.25)
    kernels.rms_norm(query, torch.ones(16), 1e-6)
    kernels.swiglu(*torch.randn(1, 1, 32).chunk(2, dim=-1))
    kernels.attention_inputs(*_projection(1, 1, 2, 1, 16, 4, 5, torch.float32, seed=5))
    fused = ["gated_delta_net_step", "attention_step", "rms_norm_rows", "swiglu_rows", "attention_inputs"]
    assert seen == fused
    # A prefill's tokens take the chunked reference, a head size the fused attention cannot step its reference.
    kernels.gated_delta_net(*layer_inputs(1, 3, 1, 2, 16, 16, torch.float32, seed=5)[:2], *args[2:])
    kernels.attention(*_attention_inputs(1, 2, 1, 24, 5, torch.float32, seed=6), torch.tensor([4]), 0.2)
    # A norm weight in another dtype than the activations: the reference widens it.
    kernels.rms_norm(query.bfloat16(), torch.ones(16), 1e-6)
    assert seen == fused


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda ops: ops.gated_delta_net_step.out(
                *layer_inputs(1, 1, 1, 2, 16, 16, torch.float32, 1)[:5],
                torch.zeros(1, 2, 16, 8),
                *layer_inputs(1, 1, 1, 2, 16, 16, torch.float32, 1)[6:],
                None,
                None,
                None,
                torch.empty(1, 1, 32),
            ),
            "conv_weight has 64 channels",
        ),
        (
            lambda ops: ops.gated_delta_net_step.out(
                *layer_inputs(1, 1, 1, 2, 16, 16, torch.float32, 1),
                torch.tensor([1]),
                None,
                None,
                torch.empty(1, 1, 32),
            ),
            "active must be",
        ),
        (
            lambda ops: ops.gated_delta_net_step.out(
                *layer_inputs(1, 2, 1, 2, 16, 16, torch.float32, 1),
                None,
                torch.empty(1, 2, 64, 3),
                torch.empty(1, 1, 2, 16, 16),
                torch.empty(1, 2, 32),
            ),
            "recurrent_trail must be",
        ),
        (
            lambda ops: ops.rms_norm_rows.out(
                torch.zeros(2, 8),
                torch.zeros(8),
                1e-6,
                True,
                torch.zeros(2, 8),
                torch.empty(2, 7),
                torch.empty(2, 8),
            ),
            "sum_out must be",
        ),
        (
            lambda ops: ops.attention_step.out(
                *_attention_inputs(1, 2, 1, 24, 5, torch.float32, 1)[:4],
                torch.tensor([4]),
                0.2,
                torch.empty(1, 1, 2, 24),
            ),
            "multiple of 16",
        ),
        (
            lambda ops: ops.attention_step.out(
                *_attention_inputs(1, 2, 1, 16, 5, torch.float32, 1)[:4],
                torch.tensor([4], dtype=torch.int32),
                0.2,
                torch.empty(1, 1, 2, 16),
            ),
            "int64",
        ),
        (
            lambda ops: ops.attention_inputs(
                *_projection(1, 1, 2, 1, 16, 4, 5, torch.float32, 1)[:4],
                torch.tensor([[5]]),
                *_projection(1, 1, 2, 1, 16, 4, 5, torch.float32, 1)[5:],
            ),
            "position 5 is outside the cache",
        ),
        (
            lambda ops: ops.attention_inputs(
                torch.zeros(1, 1, 70), *_projection(1, 1, 2, 1, 16, 4, 5, torch.float32, 1)[1:]
            ),
            "Hq \\* 2D",
        ),
        (lambda ops: ops.swiglu_rows(torch.zeros(2, 8), torch.zeros(2, 7)), "one dtype and shape"),
    ],
)
def test_bad_inputs_are_refused_with_a_message(ops, call, message):
    with pytest.raises(RuntimeError, match=message):
        call(ops)

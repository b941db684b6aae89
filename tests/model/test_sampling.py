"""Sampling: greedy at temperature 0, seeded repeatability, the top-k / top-p candidate masks, and the
frequencies the draws follow under temperature, top-k and top-p."""

from __future__ import annotations

import pytest
import torch

from model.sampling import SamplingParams, candidate_count, draw_noise, filtered_probabilities, sample


def _draws(logits: torch.Tensor, params: SamplingParams, count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(params.seed or 0)
    noise = torch.empty(logits.shape[0], candidate_count(params, logits.shape[-1]))
    return torch.stack([sample(logits, params, draw_noise(noise, generator)) for _ in range(count)], dim=1)


def test_greedy_is_argmax():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample(logits, SamplingParams(temperature=0), None), logits.argmax(-1))


def test_same_seed_same_tokens_and_different_seed_differs():
    logits = torch.zeros(2, 300)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=3)
    assert torch.equal(_draws(logits, params, 20), _draws(logits, params, 20))
    other = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=4)
    assert not torch.equal(_draws(logits, params, 20), _draws(logits, other, 20))


def test_top_k_keeps_only_the_k_most_likely():
    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(1))
    params = SamplingParams(temperature=5.0, top_k=4, top_p=1.0, seed=0)
    allowed = logits.topk(4, dim=-1).indices
    tokens = _draws(logits, params, 200)
    for row in range(3):
        assert set(tokens[row].tolist()) == set(allowed[row].tolist())


def test_top_p_keeps_the_smallest_set_reaching_p():
    probabilities = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    params = SamplingParams(temperature=1.0, top_k=0, top_p=0.75, seed=0)
    probs, ids = filtered_probabilities(probabilities.log(), params)
    kept = {int(i) for i, p in zip(ids[0], probs[0], strict=True) if p > 0}
    assert kept == {0, 1}
    assert torch.allclose(probs.sum(-1), torch.ones(1))
    assert set(_draws(probabilities.log(), params, 200)[0].tolist()) == {0, 1}
    # The most likely token survives even when it alone exceeds top_p.
    probs, ids = filtered_probabilities(torch.tensor([[5.0, 0.0, 0.0]]), SamplingParams(top_k=0, top_p=0.1))
    assert ids[0, 0] == 0 and probs[0, 0] == 1


def test_temperature_sharpens_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    cold, _ = filtered_probabilities(logits, SamplingParams(temperature=0.25, top_k=0, top_p=1.0))
    warm, _ = filtered_probabilities(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0))
    assert cold[0, 0] > warm[0, 0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
    ],
)
def test_invalid_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_seeded_session_generation_is_repeatable(engines):
    engine = engines["text_mqa"]
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=11)
    runs = []
    for _ in range(2):
        session = engine.new_session()
        session.append([1, 2, 3, 4])
        runs.append(session.generate(10, params, stop_ids=set())[0])
    assert runs[0] == runs[1]


# Distinct, untied logits: the top-k and nucleus boundaries below sit well away from any tie.
FREQUENCY_LOGITS = torch.tensor([1.2, 3.0, -0.7, 2.1, 0.4, -2.0, 1.7, 0.0, -1.1, 2.6])
DRAWS = 40_000
# P(chi-square > bound) for a correct sampler: a seeded run that fails is a wrong distribution, not bad luck.
FALSE_FAILURE_PROBABILITY = 1e-6


def _expected_frequencies(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """softmax(logits / T), renormalised over the top_k most likely, then over the smallest prefix reaching top_p."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = probs.argsort(descending=True)
    kept = torch.zeros_like(probs, dtype=torch.bool)
    kept[order[: top_k if top_k > 0 else len(order)]] = True
    probs = torch.where(kept, probs, 0.0)
    probs = probs / probs.sum()
    mass_before = 0.0
    for token in order.tolist():
        if mass_before >= top_p:
            probs[token] = 0.0
        mass_before += float(probs[token])
    return probs / probs.sum()


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "kept"),
    [
        (1.0, 0, 1.0, 10),
        (0.6, 0, 1.0, 10),
        (2.5, 0, 1.0, 10),
        (1.3, 4, 1.0, 4),
        (0.8, 0, 0.8, 3),
        (0.6, 20, 0.95, 4),  # the protocol's sampling settings
        (1.5, 6, 0.7, 3),
    ],
)
def test_draws_follow_the_tempered_truncated_distribution(temperature, top_k, top_p, kept):
    """Each token's frequency over many seeded draws matches its probability under T, top-k and top-p."""
    expected = _expected_frequencies(FREQUENCY_LOGITS, temperature, top_k, top_p)
    assert int((expected > 0).sum()) == kept  # the scenario keeps the tokens the test means it to
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=0)
    # One row per draw: the rows share the logits and take independent noise.
    logits = FREQUENCY_LOGITS.expand(DRAWS, -1)
    noise = torch.empty(DRAWS, candidate_count(params, logits.shape[-1]))
    tokens = sample(logits, params, draw_noise(noise, torch.Generator().manual_seed(1234)))
    counts = torch.bincount(tokens, minlength=len(FREQUENCY_LOGITS)).double()

    assert counts[expected == 0].sum() == 0
    observed, predicted = counts[expected > 0], DRAWS * expected[expected > 0]
    chi_square = ((observed - predicted) ** 2 / predicted).sum()
    dof = torch.tensor((kept - 1) / 2, dtype=torch.float64)
    p_value = float(torch.special.gammaincc(dof, chi_square / 2))
    assert p_value > FALSE_FAILURE_PROBABILITY, (counts.tolist(), predicted.tolist())

"""Sampling: greedy at temperature 0, seeded repeatability, and the top-k / top-p candidate masks."""

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

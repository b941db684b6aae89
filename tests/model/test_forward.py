"""The forward pass against transformers' Qwen3.5 on random checkpoints (fp32, whole sequences)."""

from __future__ import annotations

import torch

from model.cache import ModelCache
from model.sampling_params import SamplingParams


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def _random_ids(engine, shape, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, engine.config.vocab_size, shape, generator=generator)


def test_logits_match_transformers_over_whole_sequences(engines, references, variant):
    engine, reference = engines[variant], references[variant]
    ids = _random_ids(engine, (2, 77))
    with torch.no_grad():
        want = reference(ids).logits.float()
    cache = ModelCache.allocate(engine.config, 2, 128, engine.device, engine.dtype)
    with torch.inference_mode():
        got = engine.model.forward(ids, torch.zeros(2, dtype=torch.long), cache)
    assert got.shape == want.shape
    assert _relative_error(got, want) < 1e-4


def test_greedy_generation_matches_transformers_generate(engines, references, variant):
    engine, reference = engines[variant], references[variant]
    ids = _random_ids(engine, (1, 23), seed=1)
    with torch.no_grad():
        want = reference.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)[0, 23:].tolist()
    session = engine.new_session()
    session.append(ids[0].tolist())
    got = session.generate(32, SamplingParams(temperature=0), stop_ids=set())[0]
    assert got == want
    assert len(set(got)) > 3, "the random model should not be degenerate, or this test proves little"

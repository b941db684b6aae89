"""A shared prefix is prefilled once per engine and copied into each new sequence: the next-token logits, the
caches and the decoded tokens are those of a full prefill, and every sequence after the first runs only the
tokens past the prefix.

Against one whole prefill the logits agree to 1e-5 of their scale in fp32 (prefilling in two pieces sums the
chunked Gated DeltaNet and the attention in another order); against prefilling the prompt in those same two
pieces they are bit for bit the same."""

from __future__ import annotations

import torch

from model.sampling_params import SamplingParams
from model.serving.shared_prefix import SharedPrefix

GREEDY = SamplingParams(temperature=0.0)


def _ids(engine, length: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, engine.config.vocab_size, (length,), generator=generator).tolist()


def _prefilled(engine, *pieces: list[int]):
    session = engine.new_session(1, sum(map(len, pieces)) + 16)
    for piece in pieces:
        session.append(piece)
    return session


def _assert_close_to_scale(mine: torch.Tensor, theirs: torch.Tensor, tolerance: float = 1e-5) -> None:
    scale = theirs.abs().max().item()
    difference = (mine - theirs).abs().max().item()
    assert difference <= tolerance * scale, f"differs by {difference:.2e} at a scale of {scale:.2f}"


def test_a_filled_prompt_continues_exactly_as_a_full_prefill(engines, variant):
    engine = engines[variant]
    prefix = SharedPrefix(engine, _ids(engine, 37, seed=1))
    for seed, user_turn in ((2, 11), (3, 5)):
        ids = prefix.ids + _ids(engine, user_turn, seed)
        filled = engine.new_session(1, len(ids) + 16)
        prefix.fill(filled, ids)
        whole = _prefilled(engine, ids)
        in_two = _prefilled(engine, prefix.ids, ids[len(prefix.ids) :])
        _assert_close_to_scale(filled.last_logits, whole.last_logits)
        assert torch.equal(filled.last_logits, in_two.last_logits)
        # KV caches and Gated DeltaNet conv and recurrent states alike.
        for mine, theirs, same in zip(
            filled.cache.tensors(), whole.cache.tensors(), in_two.cache.tensors(), strict=True
        ):
            _assert_close_to_scale(mine, theirs)
            assert torch.equal(mine, same)
        assert filled.generate(12, GREEDY, set()) == whole.generate(12, GREEDY, set())


def test_the_prefix_is_prefilled_once_and_each_prompt_after_runs_only_its_own_tokens(engines):
    engine = engines["text_tied"]
    prefix = SharedPrefix(engine, _ids(engine, 40, seed=4))
    processed = []
    for seed in range(3):
        ids = prefix.ids + _ids(engine, 6 + seed, seed=10 + seed)
        session = engine.new_session(1, len(ids))
        ran = prefix.fill(session, ids)
        assert ran == session.processed_tokens + (len(prefix.ids) if seed == 0 else 0)
        processed.append((ran, len(ids)))
    assert processed[0][0] == processed[0][1]
    assert [ran for ran, _ in processed[1:]] == [total - len(prefix.ids) for _, total in processed[1:]]


def test_a_prompt_that_does_not_start_with_the_prefix_is_prefilled_whole(engines):
    engine = engines["text_mqa"]
    prefix = SharedPrefix(engine, _ids(engine, 20, seed=5))
    ids = _ids(engine, 24, seed=6)
    session = engine.new_session(1, len(ids))
    assert prefix.fill(session, ids) == len(ids)
    assert torch.equal(session.last_logits, _prefilled(engine, ids).last_logits)
    # The prefix alone leaves no token of its own to run, so it is prefilled as it is.
    alone = engine.new_session(1, len(prefix.ids))
    assert prefix.fill(alone, list(prefix.ids)) == len(prefix.ids)

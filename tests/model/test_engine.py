"""Sessions: incremental appends, chunked prefill, snapshots, forks, ragged batches and token accounting."""

from __future__ import annotations

import pytest
import torch

from model.sampling_params import SamplingParams
from tests.model.forked_rows import forked

GREEDY = SamplingParams(temperature=0)


def _prompt(engine, length: int, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, engine.config.vocab_size, (length,), generator=generator).tolist()


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float = 1e-4) -> bool:
    return ((a - b).abs().max() / b.abs().max()).item() < tolerance


def test_pieces_give_the_logits_of_one_prefill(engines, variant):
    engine = engines[variant]
    prompt = _prompt(engine, 90)
    whole = engine.new_session()
    whole.append(prompt)
    pieces = engine.new_session()
    for a, b in ((0, 1), (1, 40), (40, 41), (41, 90)):
        pieces.append(prompt[a:b])
    assert pieces.lengths == [90]
    assert _close(pieces.last_logits, whole.last_logits)
    assert pieces.processed_tokens == whole.processed_tokens == 90


def test_chunked_prefill_equals_token_by_token_decode(engines, variant):
    engine = engines[variant]
    prompt = _prompt(engine, 70, seed=2)
    chunked = engine.new_session()
    original_chunk = engine.prefill_chunk
    engine.prefill_chunk = 32
    try:
        chunked.append(prompt)
    finally:
        engine.prefill_chunk = original_chunk
    stepwise = engine.new_session()
    for token in prompt:
        stepwise.append([token])
    assert _close(chunked.last_logits, stepwise.last_logits)
    for mine, theirs in zip(chunked.cache.recurrent, stepwise.cache.recurrent, strict=True):
        assert _close(mine, theirs)


def test_generate_leaves_last_token_pending_and_counts_each_token_once(engines):
    engine = engines["text_tied"]
    session = engine.new_session()
    session.append(_prompt(engine, 30))
    first = session.generate(10, GREEDY, stop_ids=set())[0]
    assert len(first) == 10
    assert session.lengths == [40]
    # The 10th sampled token has not been run yet; the next append runs it before the new tokens.
    assert session.processed_tokens == 39
    session.append([5, 6, 7])
    assert session.processed_tokens == 43
    assert session.lengths == [43]
    reference = engine.new_session()
    reference.append(_prompt(engine, 30) + first + [5, 6, 7])
    assert _close(session.last_logits, reference.last_logits)


def test_generation_stops_at_a_stop_id_and_includes_it(engines):
    engine = engines["text_tied"]
    session = engine.new_session()
    prompt = _prompt(engine, 20, seed=3)
    session.append(prompt)
    free = session.generate(12, GREEDY, stop_ids=set())[0]
    stop = free[5]
    assert stop not in free[:5]
    fresh = engine.new_session()
    fresh.append(prompt)
    assert fresh.generate(12, GREEDY, stop_ids={stop})[0] == free[:6]


def test_snapshot_restore_round_trip(engines, variant):
    engine = engines[variant]
    session = engine.new_session()
    session.append(_prompt(engine, 40, seed=4))
    snapshot = session.snapshot()
    first = session.generate(16, GREEDY, stop_ids=set())[0]
    session.append(_prompt(engine, 7, seed=5))
    session.restore(snapshot)
    assert session.lengths == [40]
    assert session.generate(16, GREEDY, stop_ids=set())[0] == first


def test_fork_rows_continue_the_parent(engines, variant):
    engine = engines[variant]
    parent = engine.new_session()
    prompt = _prompt(engine, 33, seed=6)
    parent.append(prompt)
    children = forked(parent, 3)
    assert children.lengths == [33, 33, 33]
    sampled = children.generate(
        12, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=7), stop_ids=set()
    )
    assert len({tuple(row) for row in sampled}) > 1, "independent rows should sample differently"
    children.append([[], [], []])  # runs each row's pending last token
    for row, tokens in enumerate(sampled):
        single = engine.new_session()
        single.append(prompt + tokens)
        assert _close(children.last_logits[row : row + 1], single.last_logits)
    assert parent.generate(8, GREEDY, stop_ids=set())[0] == _greedy(engine, prompt, 8)


def _greedy(engine, prompt: list[int], count: int) -> list[int]:
    session = engine.new_session()
    session.append(prompt)
    return session.generate(count, GREEDY, stop_ids=set())[0]


def test_ragged_batch_rows_equal_single_row_runs(engines, variant):
    engine = engines[variant]
    prompts = [_prompt(engine, n, seed=n) for n in (17, 41, 5)]
    batch = engine.new_session(batch_size=3)
    batch.append(prompts)
    limits = [9, 14, 6]
    got = batch.generate(limits, GREEDY, stop_ids=set())
    assert got == [_greedy(engine, p, n) for p, n in zip(prompts, limits, strict=True)]
    # Only some rows continue: the others must keep their state untouched.
    batch.append([[3, 4], [], [8]])
    again = batch.generate([5, 5], GREEDY, stop_ids=set(), rows=[0, 2])
    assert again[0] == _greedy(engine, prompts[0] + got[0] + [3, 4], 5)
    assert again[1] == _greedy(engine, prompts[2] + got[2] + [8], 5)
    assert batch.generate(4, GREEDY, stop_ids=set(), rows=[1])[0] == _greedy(engine, prompts[1] + got[1], 4)


def test_rows_that_stop_early_do_not_disturb_later_turns(engines):
    engine = engines["text_tied"]
    prompts = [_prompt(engine, 12, seed=10), _prompt(engine, 12, seed=11)]
    batch = engine.new_session(batch_size=2)
    batch.append(prompts)
    free = [_greedy(engine, p, 10) for p in prompts]
    stop = free[0][2]
    got = batch.generate(10, GREEDY, stop_ids={stop})
    assert got[0] == free[0][: free[0].index(stop) + 1]
    batch.append([[1, 2], [1, 2]])
    follow = batch.generate(6, GREEDY, stop_ids=set())
    assert follow[0] == _greedy(engine, prompts[0] + got[0] + [1, 2], 6)
    assert follow[1] == _greedy(engine, prompts[1] + got[1] + [1, 2], 6)


def test_bad_appends_are_refused_without_losing_state(engines):
    engine = engines["text_tied"]
    session = engine.new_session(max_tokens=20)
    session.append(_prompt(engine, 15))
    with pytest.raises(ValueError, match="max_tokens"):
        session.append(_prompt(engine, 6))
    with pytest.raises(ValueError, match="vocabulary"):
        session.append([engine.config.vocab_size])
    assert session.lengths == [15]
    assert len(session.generate(50, GREEDY, stop_ids=set())[0]) == 5  # clipped to the capacity
    with pytest.raises(ValueError, match="empty"):
        engine.new_session().generate(3, GREEDY, stop_ids=set())


def test_one_token_for_some_rows_runs_in_one_step_and_leaves_what_row_by_row_appends_leave(engines, variant):
    engine = engines[variant]
    prompts = [_prompt(engine, length, seed) for seed, length in enumerate((12, 7, 19))]
    stepped, by_row = engine.new_session(3, 32), engine.new_session(3, 32)
    for session in (stepped, by_row):
        for row, prompt in enumerate(prompts):
            session.append([prompt if r == row else [] for r in range(3)])
    calls = []

    def counted(name):
        original = getattr(engine.model, name)

        def call(*args, **kwargs):
            calls.append((name, args[0].shape))
            return original(*args, **kwargs)

        return call

    for name in ("prefill", "decode"):
        setattr(engine.model, name, counted(name))
    try:
        stepped.append([[5], [], [9]])  # rows 0 and 2 get a token, row 1 sits out
    finally:
        del engine.model.prefill, engine.model.decode
    assert calls == [("decode", torch.Size([3, 1]))]
    by_row.append([[5], [], []])
    by_row.append([[], [], [9]])
    assert stepped.lengths == by_row.lengths == [13, 7, 20]
    assert stepped.processed_tokens == by_row.processed_tokens
    assert _close(stepped.last_logits, by_row.last_logits, 1e-5)
    for mine, theirs in zip(
        stepped.cache.conv + stepped.cache.recurrent, by_row.cache.conv + by_row.cache.recurrent, strict=True
    ):
        assert _close(mine, theirs, 1e-5)
    # The row that sat out carries on as if nothing ran.
    assert stepped.generate(6, GREEDY, set()) == by_row.generate(6, GREEDY, set())

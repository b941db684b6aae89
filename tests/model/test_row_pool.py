"""Rows lent to sequences that come and go: the session grows and shrinks in powers of two, rows move when it
does without changing what any sequence generates, and rows decoded together give each sequence the tokens
it gets alone."""

from __future__ import annotations

import pytest
import torch

from benchmarks.emulated_capture import EmulatedCapture
from model.engine import Engine
from model.sampling_params import SamplingParams
from model.serving.row_pool import RowPool

GREEDY = SamplingParams(temperature=0.0)


def _prompt(engine, length: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, engine.config.vocab_size, (length,), generator=generator).tolist()
    session = engine.new_session(1, length)
    session.append(ids)
    return session, ids


def _alone(engine, ids: list[int], tokens: int) -> list[int]:
    session = engine.new_session(1, len(ids) + tokens)
    session.append(ids)
    return session.generate(tokens, GREEDY, set())[0]


@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
def test_rows_decoded_together_give_each_sequence_its_own_tokens(engines, captured):
    engine = engines["text_tied"]
    if captured:  # the decode steps replayed on the engine's static cache, as CUDA graphs are on a GPU
        engine = Engine(engine.model, engine.tokenizer, engine.options, capture=EmulatedCapture())
    pool = RowPool(engine, max_rows=4)
    prompts = [_prompt(engine, length, seed) for seed, length in enumerate((9, 14, 5))]
    leases = [pool.admit(session, 1, 64) for session, _ in prompts]
    assert pool.session.batch_size == 4 and pool.rows_in_use == 3
    together = pool.generate([(lease, [0], [10]) for lease in leases], GREEDY, set())
    for (_, ids), tokens in zip(prompts, together, strict=True):
        assert tokens == [_alone(engine, ids, 10)]
    assert [lease.lengths for lease in leases] == [[len(ids) + 10] for _, ids in prompts]
    # Each decoded token but the last (still pending) has run through the model.
    assert [lease.processed for lease in leases] == [9, 9, 9]


def test_the_session_grows_and_shrinks_in_powers_of_two_and_moved_rows_carry_on(engines):
    engine = engines["text_mqa"]
    pool = RowPool(engine, max_rows=8)
    first_prompt, first_ids = _prompt(engine, 7, seed=1)
    first = pool.admit(first_prompt, 1, 48)
    assert pool.session.batch_size == 1
    pool.generate([(first, [0], [4])], GREEDY, set())
    second = pool.admit(_prompt(engine, 6, seed=2)[0], 3, 48)  # 4 rows in use
    assert pool.session.batch_size == 4 and first.rows == [0] and second.rows == [1, 2, 3]
    third_prompt, third_ids = _prompt(engine, 8, seed=3)
    third = pool.admit(third_prompt, 1, 48)
    assert pool.session.batch_size == 8 and third.rows == [4]
    pool.release(second)
    # Two rows are left: the session halves twice, and the rows move up to rows 0 and 1.
    assert pool.session.batch_size == 2 and (first.rows, third.rows) == ([0], [1])
    carried = pool.generate([(first, [0], [6]), (third, [0], [6])], GREEDY, set())
    assert carried[0] == [_alone(engine, first_ids, 10)[4:]]
    assert carried[1] == [_alone(engine, third_ids, 6)]
    pool.release(first)
    pool.release(third)
    assert pool.session is None and pool.rows_in_use == 0


def test_the_row_limit_admits_a_larger_sequence_only_alone(engines):
    engine = engines["text_tied"]
    pool = RowPool(engine, max_rows=2)
    prompt, _ = _prompt(engine, 5, seed=4)
    assert pool.fits(3)  # nothing else runs: it may have all the rows it needs
    big = pool.admit(prompt, 3, 16)
    assert pool.session.batch_size == 3 and not pool.fits(1)
    with pytest.raises(ValueError, match="do not fit"):
        pool.admit(prompt, 1, 16)
    pool.release(big)
    small = pool.admit(prompt, 2, 16)
    assert not pool.fits(1) and pool.session.batch_size == 2
    pool.release(small)

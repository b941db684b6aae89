"""Appends replayed as captured prefills (emulated on the CPU) against eager appends: the same tokens, caches and
next logits through an agent's turns, ragged batches and forks; one capture per row and piece length, none for a
long prompt; a failed capture falls back to the eager prefill and loses nothing."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.emulated_capture import EmulatedCapture
from model.append_steps import MAX_REPLAYED_APPEND, pieces
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from tests.model.forked_rows import forked
from tests.model.test_decode_capture import assert_same_state, random_tokens

GREEDY = SamplingParams(temperature=0)
NUCLEUS = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=3)


@given(st.integers(min_value=0, max_value=4 * MAX_REPLAYED_APPEND))
def test_pieces_are_distinct_powers_of_two_that_tile_the_tokens(count):
    cut = pieces(count)
    lengths = [length for _, length in cut]
    assert sum(lengths) == count
    assert all(length & (length - 1) == 0 and length > 0 for length in lengths)
    assert lengths == sorted(set(lengths), reverse=True)
    assert [offset for offset, _ in cut] == [sum(lengths[:i]) for i in range(len(cut))]


def test_an_agents_turns_replayed_match_eager_appends(pair):
    """A prompt, then tool results between replies, as the agent runs a question: the same replies and state."""
    captured, eager, capture = pair
    sessions = [engine.new_session() for engine in (captured, eager)]
    turns = [
        random_tokens(eager, 37, seed=0),
        random_tokens(eager, 23, seed=1),
        random_tokens(eager, 64, seed=2),
        [9, 4],
    ]
    for turn, sampling in zip(turns, (GREEDY, NUCLEUS, GREEDY, NUCLEUS), strict=True):
        for session in sessions:
            session.append(turn)
        got, want = (session.generate(6, sampling, stop_ids=set()) for session in sessions)
        assert got == want
        assert_same_state(*sessions)
    assert captured.cuda_graph, "a capture failed and the appends ran eagerly"
    # 37 = 32 + 4 + 1, 23 = 16 + 4 + 2 + 1, 64 and 2 (assert_same_state ran each reply's pending token).
    assert capture.captured["AppendSteps"] == len({32, 4, 1, 16, 2, 64})


def test_ragged_batches_rows_left_out_and_forks(pair):
    captured, eager, capture = pair
    results = []
    for engine in (captured, eager):
        session = engine.new_session(batch_size=3)
        session.append([random_tokens(eager, n, seed=n) for n in (17, 41, 5)])
        tokens = session.generate([4, 6, 3], NUCLEUS, stop_ids=set())
        session.append([random_tokens(eager, 11, seed=5), [], random_tokens(eager, 30, seed=6)])
        tokens += session.generate(5, GREEDY, stop_ids=set(), rows=[0, 2])
        root = engine.new_session()
        root.append(random_tokens(eager, 20, seed=8))
        children = forked(root, 2)
        # Rows of one length, which the eager engine prefills as one batch.
        children.append([random_tokens(eager, 7, seed=9), random_tokens(eager, 7, seed=10)])
        tokens += children.generate(4, GREEDY, stop_ids=set())
        results.append((session, children, tokens))
    assert results[0][2] == results[1][2]
    assert_same_state(results[0][0], results[1][0])
    assert_same_state(results[0][1], results[1][1])
    assert capture.captured["AppendSteps"] > 0


def test_each_row_and_piece_is_captured_once(pair):
    captured, eager, capture = pair
    for question in range(3):
        session = captured.new_session(batch_size=2)
        session.append([random_tokens(eager, 12, seed=question), random_tokens(eager, 3, seed=question + 10)])
        session.generate(2, GREEDY, stop_ids=set())
    # Row 0's 12 = 8 + 4, row 1's 3 = 2 + 1, the same in every question.
    assert capture.captured["AppendSteps"] == 4
    replayed = capture.replayed_ops
    session.append([random_tokens(eager, 11, seed=7), []])  # with the pending tokens: 12 and 1
    assert capture.captured["AppendSteps"] == 4
    assert capture.replayed_ops > replayed


def test_a_long_prompt_is_prefilled_eagerly(checkpoint_dirs, variant):
    capture = EmulatedCapture()
    options = EngineOptions(device="cpu", dtype="float32", max_context=MAX_REPLAYED_APPEND + 64)
    base = Engine.load(checkpoint_dirs[variant], options)
    captured = Engine(base.model, base.tokenizer, base.options, capture=capture)
    eager = Engine(base.model, base.tokenizer, replace(base.options, cuda_graph=False))
    prompt = random_tokens(eager, MAX_REPLAYED_APPEND + 1, seed=3)
    sessions = [engine.new_session() for engine in (captured, eager)]
    for session in sessions:
        session.append(prompt)
    assert capture.captured["AppendSteps"] == 0
    got, want = (session.generate(3, GREEDY, stop_ids=set()) for session in sessions)
    assert got == want


class FailingCapture(EmulatedCapture):
    """Captures decode steps, and fails on a prefill as a CUDA graph capture can (out of memory, say)."""

    def capture(self, step):
        if step.__qualname__.startswith("AppendSteps"):
            raise RuntimeError("CUDA error: out of memory")
        return super().capture(step)


def test_a_failed_capture_falls_back_to_the_eager_prefill_and_keeps_decode_steps_captured(
    engines, variant, caplog
):
    base = engines[variant]
    captured = Engine(base.model, base.tokenizer, base.options, capture=FailingCapture())
    eager = Engine(base.model, base.tokenizer, replace(base.options, cuda_graph=False))
    sessions = [engine.new_session() for engine in (captured, eager)]
    prompt = random_tokens(eager, 19, seed=4)
    with caplog.at_level("WARNING", logger="model.engine"):
        for session in sessions:
            session.append(prompt)
        got, want = (session.generate(5, GREEDY, stop_ids=set()) for session in sessions)
        for session in sessions:
            session.append(prompt[:9])
    assert got == want
    assert_same_state(*sessions)
    assert not captured.replays_appends
    assert captured.cuda_graph, "the decode steps should stay captured"
    assert caplog.text.count("appending eagerly from now on: CUDA error: out of memory") == 1


def test_an_append_of_nothing_changes_nothing(pair):
    captured, eager, capture = pair
    sessions = [engine.new_session(batch_size=2) for engine in (captured, eager)]
    for session in sessions:
        session.append([[], []])
        session.append([random_tokens(eager, 5, seed=1), random_tokens(eager, 9, seed=2)])
        session.append([[], []])
    assert sessions[0].lengths == sessions[1].lengths == [5, 9]
    assert_same_state(*sessions)

"""Captured verify passes (emulated on the CPU): speculative decoding that replays one recorded pass per width in
the engine's workspace emits the tokens of plain decoding and leaves its caches and states, over scripted drafts
right and wrong in a ragged batch, greedy and seeded; one capture per width; a failed capture falls back to
eager passes."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.emulated_capture import EmulatedCapture
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from tests.model.test_decode_capture import FailingCapture, assert_same_state
from tests.model.test_speculative import GREEDY, LIMITS, PATTERNS, PROMPTS, ScriptedDrafter

SPECULATE_TOKENS = 5
SEEDED = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, seed=11)


def _engines(path, capture) -> tuple[Engine, Engine]:
    """(an engine whose passes `capture` records, drafting PATTERNS['mixed'] of plain decoding's tokens, the plain
    eager engine that wrote those tokens)."""
    options = EngineOptions(device="cpu", dtype="float32", max_context=256, speculate="off")
    plain = Engine.load(path, options)
    speculating = Engine(
        plain.model,
        plain.tokenizer,
        replace(options, speculate="ngram", speculate_tokens=SPECULATE_TOKENS),
        capture=capture,
    )
    speculating.draft_budget = None  # every scripted draft checked whole
    return speculating, plain


def _run(engine: Engine, sampling: SamplingParams):
    session = engine.new_session(len(PROMPTS), 200)
    session.append([list(p) for p in PROMPTS])
    return session, session.generate(list(LIMITS), sampling, stop_ids=set())


def _script(engine: Engine, plain: Engine, sampling: SamplingParams):
    plain_session, expected = _run(plain, sampling)
    references = {tuple(p): out for p, out in zip(PROMPTS, expected, strict=True)}
    engine.drafter = ScriptedDrafter(references, PATTERNS["mixed"], engine.config.vocab_size)
    return plain_session, expected


def test_replayed_passes_emit_plain_decodings_tokens_and_states(checkpoint_dirs, variant):
    capture = EmulatedCapture()
    engine, plain = _engines(checkpoint_dirs[variant], capture)
    plain_session, expected = _script(engine, plain, GREEDY)
    session, tokens = _run(engine, GREEDY)
    assert tokens == expected
    assert engine.cuda_graph, "a capture failed and the passes ran eagerly"
    assert capture.captured["VerifySteps"] == SPECULATE_TOKENS + 1  # one step per width, 1 to K + 1 tokens
    stats = session.speculation
    assert stats.verify_passes > 0 and stats.steps > 0 and 0 < stats.accepted < stats.drafted
    assert_same_state(session, plain_session)
    # The session goes on as a plain one: a tool result, then more tokens, through the same captured passes.
    session.append([[5], [], [7]])
    plain_session.append([[5], [], [7]])
    assert session.generate(20, GREEDY, set()) == plain_session.generate(20, GREEDY, set())
    assert capture.captured["VerifySteps"] == SPECULATE_TOKENS + 1


def test_seeded_sampling_through_replayed_passes(checkpoint_dirs):
    engine, plain = _engines(checkpoint_dirs["text_tied"], EmulatedCapture())
    plain_session, expected = _script(engine, plain, SEEDED)
    session, tokens = _run(engine, SEEDED)
    assert tokens == expected
    assert session.speculation.accepted > 0
    assert_same_state(session, plain_session)


def test_two_sessions_share_the_workspace_and_keep_their_own_states(checkpoint_dirs):
    """Each generate() copies its session's state in and the new positions out: two sessions taking turns end as
    two plain ones do (drafts from the context)."""
    engine, plain = _engines(checkpoint_dirs["text_mqa"], EmulatedCapture())
    pairs = []
    for engine_ in (engine, plain):
        first, second = engine_.new_session(len(PROMPTS), 200), engine_.new_session(1, 200)
        first.append([list(p) for p in PROMPTS])
        second.append([9, 8, 7, 9, 8, 7, 9, 8])
        outputs = [first.generate(10, GREEDY, set()), second.generate(12, GREEDY, set())]
        outputs.append(first.generate(10, GREEDY, set()))
        pairs.append((outputs, first, second))
    (got, *sessions), (want, *plain_sessions) = pairs
    assert got == want
    for mine, theirs in zip(sessions, plain_sessions, strict=True):
        assert_same_state(mine, theirs)


def test_a_failed_capture_falls_back_to_eager_passes(checkpoint_dirs, caplog):
    engine, plain = _engines(checkpoint_dirs["text_mqa"], FailingCapture())
    plain_session, expected = _script(engine, plain, GREEDY)
    session, tokens = _run(engine, GREEDY)
    assert tokens == expected
    assert not engine.cuda_graph
    assert caplog.text.count("decoding eagerly from now on") == 1
    assert session.speculation.verify_passes > 0
    assert_same_state(session, plain_session)

"""A seeded generation draws one random stream: the same tokens whether it runs as one generate() call or is
split into chunks (as the agent does to check for cancellation), and the same again after restore()."""

from __future__ import annotations

import pytest
import torch

from benchmarks.emulated_capture import EmulatedCapture
from model.engine import Engine
from model.sampling_params import SamplingParams
from model.serving import scheduler
from model.serving.cancel import CancelEvent
from tests.model.forked_rows import forked

SEEDED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=11)


def _prompt(engine, length: int, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, engine.config.vocab_size, (length,), generator=generator).tolist()


def _in_chunks(
    session, total: int, chunk: int, sampling: SamplingParams, stop_ids: set[int]
) -> list[list[int]]:
    """Generate up to total tokens per row in calls of at most chunk tokens, dropping rows that stopped."""
    generated: list[list[int]] = [[] for _ in session.lengths]
    running = list(range(len(generated)))
    while running:
        outputs = session.generate(
            [min(chunk, total - len(generated[r])) for r in running], sampling, stop_ids, running
        )
        for row, tokens in zip(running, outputs, strict=True):
            generated[row] += tokens
        running = [r for r in running if generated[r][-1] not in stop_ids and len(generated[r]) < total]
    return generated


@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
def test_chunked_seeded_generation_draws_the_tokens_of_one_call(engines, captured):
    engine = engines["text_tied"]
    if captured:
        engine = Engine(engine.model, engine.tokenizer, engine.options, capture=EmulatedCapture())
    prompt = _prompt(engine, 21)
    whole = engine.new_session()
    whole.append(prompt)
    want = whole.generate(16, SEEDED, stop_ids=set())
    for chunk in (1, 5):
        session = engine.new_session()
        session.append(prompt)
        assert _in_chunks(session, 16, chunk, SEEDED, set()) == want, f"chunks of {chunk}"


def test_chunked_seeded_generation_of_forked_rows_with_stops(engines):
    engine = engines["text_mqa"]
    parent = engine.new_session()
    parent.append(_prompt(engine, 15, seed=1))
    free = forked(parent, 3).generate(30, SEEDED, stop_ids=set())
    stop = {free[1][6], free[2][17]}
    want = forked(parent, 3).generate(30, SEEDED, stop_ids=stop)
    assert len({len(row) for row in want}) > 1, "rows should stop at different lengths"
    assert _in_chunks(forked(parent, 3), 30, 4, SEEDED, stop) == want


def test_restore_returns_to_the_same_random_stream(engines):
    engine = engines["text_tied"]
    session = engine.new_session()
    session.append(_prompt(engine, 12, seed=2))
    session.generate(5, SEEDED, stop_ids=set())
    snapshot = session.snapshot()
    first = session.generate(8, SEEDED, stop_ids=set())
    session.restore(snapshot)
    assert session.generate(8, SEEDED, stop_ids=set()) == first


def test_agent_cancel_chunks_do_not_change_seeded_replies(engines, monkeypatch):
    # The agent imports the server's dependencies, which a GPU machine may lack.
    local = pytest.importorskip("mcp_server.agent.policies.local")
    prompts = pytest.importorskip("mcp_server.agent.prompts")
    policy = local.LocalPolicy(engines["text_tied"], prompts.Prompts(system="s", user_template="{question}"))
    prompt = policy.chat.first_prompt("s", "q")
    sampling = SamplingParams(seed=5)

    def reply(cancel: CancelEvent | None) -> list[str]:
        run = policy.start(prompt, 2, 200)
        try:
            return [c.raw for c in run.complete([0, 1], [40, 40], sampling, cancel)]
        finally:
            run.close()

    monkeypatch.setattr(scheduler, "DECODE_CHUNK_TOKENS", 40)
    whole = reply(None)
    monkeypatch.setattr(scheduler, "DECODE_CHUNK_TOKENS", 6)
    assert reply(CancelEvent()) == whole

"""The local engine policy end to end on a tiny random checkpoint: the model writes nonsense, the episode
still ends cleanly within its budget, and every token of the episode runs through the model exactly once."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch

from benchmarks.random_checkpoint import write_tiny_checkpoint
from mcp_server.agent import Agent, AgentConfig
from mcp_server.agent.errors import ModelOutOfMemoryError
from mcp_server.agent.policies.local import LocalPolicy
from mcp_server.agent.prompts import Prompts
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.serving import scheduler
from model.serving.cancel import CancelEvent, Cancelled
from model.serving.row_pool import RowPool
from model.session import Session

# Far below the 256 tokens another round needs: after the first reply neither a second round nor the forced
# final turn fits, so a model that writes no runnable call in that reply ends out of tokens with no SQL.
BUDGET = 90
# Short prompts keep the tiny model's CPU work small; the loop does not depend on their wording.
PROMPTS = Prompts(system="Answer with SQLite.", user_template="Q: {question}")


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> LocalPolicy:
    model_dir = write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-qwen35"))
    return LocalPolicy(Engine.load(model_dir, EngineOptions(device="cpu")), PROMPTS)


def _check_episode(trace, budget: int) -> None:
    assert trace.length <= budget
    # Generated ids stay as sampled: the sequence is exactly the prompt, every reply and every appended turn.
    appended = sum(r.appended_tokens for r in trace.rounds[1:])
    assert trace.length == trace.prompt_tokens + trace.generated_tokens + appended


def test_nonsense_episode_ends_cleanly_and_prefills_only_new_tokens(policy, sqlite_db):
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=3))
    answer = Agent(sqlite_db, policy, config).ask("How many employees?")
    trace = answer.chosen.trace
    assert (answer.ending, trace.limit, len(trace.rounds)) == ("no_sql", "tokens", 1)
    assert answer.chosen.sql is None and trace.rounds[0].calls == []
    _check_episode(trace, BUDGET)
    # Each token ran through the model once; only the last sampled token is still waiting for its turn.
    assert answer.processed_tokens == trace.length - 1
    result = answer.to_dict()
    assert result["trace"]["processed_tokens"] == trace.length - 1
    assert all(r["model_ms"] > 0 for r in result["trace"]["rounds"])


def test_samples_fork_one_prefilled_prompt(policy, sqlite_db):
    samples = 2
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=5), samples=samples)
    fresh = LocalPolicy(policy.engine, PROMPTS)  # its system turn is prefilled by this question
    answer = Agent(sqlite_db, fresh, config).ask("How many employees?")
    traces = [e.trace for e in answer.episodes]
    assert len(traces) == samples and sum(v["count"] for v in answer.votes) == samples
    for trace in traces:
        _check_episode(trace, BUDGET)
    prompt = traces[0].prompt_tokens
    # The shared prompt is prefilled once, then each row only its own tokens.
    assert answer.processed_tokens == prompt + sum(t.length - prompt - 1 for t in traces)


def test_questions_after_the_first_prefill_only_their_own_user_turn(policy, sqlite_db):
    fresh = LocalPolicy(policy.engine, PROMPTS)
    system_turn = len(fresh.system_turn.ids)
    assert system_turn > 0
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=3))
    answers = [Agent(sqlite_db, fresh, config).ask(q) for q in ("How many employees?", "Who earns most?")]
    first, second = (a.chosen.trace for a in answers)
    assert answers[0].processed_tokens == first.length - 1
    assert answers[1].processed_tokens == second.length - 1 - system_turn
    # The model saw the same prompt text either way: the prompt's tokens start with the system turn's.
    assert first.prompt_tokens > system_turn and second.prompt_tokens > system_turn


def test_a_cancel_stops_decoding_at_the_next_chunk_and_gives_the_rows_back(policy, monkeypatch):
    monkeypatch.setattr(scheduler, "DECODE_CHUNK_TOKENS", 2)
    cancel, noticed = CancelEvent(), threading.Event()
    original = RowPool.generate

    def cancelled_during_the_first_chunk(pool, *args, **kwargs):
        outputs = original(pool, *args, **kwargs)
        cancel.set()
        assert noticed.wait(30), "the question did not notice its cancel"
        return outputs

    monkeypatch.setattr(RowPool, "generate", cancelled_during_the_first_chunk)
    run = policy.start(policy.chat.first_prompt("s", "q"), 1, 64)
    prompt_length = run.length(0)
    with pytest.raises(Cancelled):
        try:
            # The seeded random model samples no stop token in its first two steps.
            run.complete([0], [10], SamplingParams(seed=1), cancel)
        finally:
            noticed.set()
    assert run.length(0) == prompt_length + 2  # the chunk under way ends; no other follows
    assert policy.scheduler.pool.rows_in_use == 1
    run.close()
    assert policy.scheduler.pool.rows_in_use == 0 and policy.scheduler.pool.session is None


@pytest.mark.parametrize(
    ("error", "where"),
    [
        (
            torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 3 GiB"),
            "generate",
        ),
        (MemoryError(), "append"),
    ],
    ids=["cuda-generating", "host-reading"],
)
def test_running_out_of_memory_ends_the_question_and_the_next_one_runs(
    policy, sqlite_db, monkeypatch, error, where
):
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=3))
    original = getattr(Session, where)
    failed_sessions = []

    def out_of_memory_once(session, *args, **kwargs):
        if not failed_sessions:
            failed_sessions.append(weakref.ref(session))
            raise error
        return original(session, *args, **kwargs)

    monkeypatch.setattr(Session, where, out_of_memory_once)
    with pytest.raises(ModelOutOfMemoryError) as raised:
        Agent(sqlite_db, policy, config).ask("How many employees?")
    message = str(raised.value)
    del raised  # its traceback holds the failed question's frames
    gc.collect()
    assert message.startswith(
        "the local model ran out of memory on cpu (CUDA out of memory"
        if where == "generate"
        else "the local model ran out of memory on cpu (MemoryError)"
    )
    assert "--token-budget" in message and "--samples" in message and "--endpoint" in message
    assert "GPU 0 has" not in message  # torch's allocator statistics stay out of the message
    assert failed_sessions[0]() is None  # the question's caches are let go
    answer = Agent(sqlite_db, policy, config).ask("How many employees?")
    assert answer.ending == "no_sql" and len(failed_sessions) == 1

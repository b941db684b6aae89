"""Questions on the local engine share one batch: a question arriving while another decodes joins it between
chunks, each keeps its own episode (greedy replies as when alone), memory stays within --max-batch-rows rows
(more questions wait in order of arrival), and a finished or failed question gives its rows back at once."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from benchmarks.random_checkpoint import write_tiny_checkpoint
from mcp_server.agent import Agent, AgentConfig
from mcp_server.agent.policies.local import LocalPolicy
from mcp_server.agent.prompts import Prompts
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.serving import scheduler
from model.serving.cancel import CancelEvent, Cancelled
from model.serving.row_pool import RowPool

# Slow (left out of the fast tier): decodes batches of questions with a tiny model.
pytestmark = pytest.mark.slow


PROMPTS = Prompts(system="Answer with SQLite.", user_template="Q: {question}")
# Room for one long reply of the random model and nothing after it.
BUDGET = 160
GREEDY = SamplingParams(temperature=0.0)
GUARD_S = 60.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    return Engine.load(
        write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-qwen35")), EngineOptions(device="cpu")
    )


def limited_policy(engine: Engine, max_batch_rows: int) -> LocalPolicy:
    """A policy on the engine's model whose batch holds at most max_batch_rows rows."""
    options = replace(engine.options, max_batch_rows=max_batch_rows)
    return LocalPolicy(Engine(engine.model, engine.tokenizer, options), PROMPTS)


class BatchLog:
    """Wraps RowPool.generate: records, per decode call, the leases whose rows it ran and the rows in use."""

    def __init__(self, monkeypatch, before_call=None) -> None:
        self.calls: list[tuple[int, int]] = []  # (leases decoded together, rows in use)
        self.most_rows = 0
        original = RowPool.generate
        log = self

        def generate(pool, parts, sampling, stop_ids):
            if before_call is not None:
                before_call(pool, parts)
            log.calls.append((len(parts), pool.rows_in_use))
            log.most_rows = max(log.most_rows, pool.rows_in_use)
            return original(pool, parts, sampling, stop_ids)

        monkeypatch.setattr(RowPool, "generate", generate)


def ask_in_thread(agent: Agent, question: str, answers: dict) -> threading.Thread:
    def run() -> None:
        answers[question] = agent.ask(question)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_for(condition, what: str) -> None:
    done = threading.Event()
    for _ in range(int(GUARD_S / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError(f"no {what} within {GUARD_S:g} s")


def test_a_question_arriving_mid_reply_joins_the_batch_and_each_keeps_its_own_reply(
    engine, sqlite_db, monkeypatch
):
    monkeypatch.setattr(scheduler, "DECODE_CHUNK_TOKENS", 4)
    config = AgentConfig(token_budget=BUDGET, sampling=GREEDY)
    alone = {}
    for question in ("How many employees?", "Which department is largest?"):
        alone[question] = Agent(sqlite_db, LocalPolicy(engine, PROMPTS), config).ask(question)

    policy = LocalPolicy(engine, PROMPTS)
    first_decoding = threading.Event()

    def hold_until_the_second_question_waits(pool: RowPool, parts: list) -> None:
        # The first chunk holds the engine until the second question has asked for rows, and the first chunk
        # after its admission until it asked for its reply: it then joins the first one's reply midway.
        if not first_decoding.is_set():
            first_decoding.set()
            wait_for(lambda: policy.scheduler.waiting >= 1, "second question waiting for rows")
        elif pool.rows_in_use == 2 and len(parts) == 1 and not any(n == 2 for n, _ in log.calls):
            wait_for(lambda: policy.scheduler.waiting >= 1, "second question asking for its reply")

    log = BatchLog(monkeypatch, hold_until_the_second_question_waits)
    together: dict = {}
    first = ask_in_thread(Agent(sqlite_db, policy, config), "How many employees?", together)
    assert first_decoding.wait(GUARD_S)
    second = ask_in_thread(Agent(sqlite_db, policy, config), "Which department is largest?", together)
    for thread in (first, second):
        thread.join(GUARD_S)
    assert any(parts == 2 for parts, _ in log.calls), log.calls
    assert log.calls[0][0] == 1 and log.most_rows == 2
    for question, answer in together.items():
        mine, theirs = answer.chosen.trace, alone[question].chosen.trace
        assert [r.reply for r in mine.rounds] == [r.reply for r in theirs.rounds]
        assert mine.length == theirs.length and mine.generated_tokens > 2 * 4
    system_turn = len(policy.system_turn.ids)
    assert together["How many employees?"].processed_tokens == alone["How many employees?"].processed_tokens
    second_answer = together["Which department is largest?"]
    assert second_answer.processed_tokens == second_answer.chosen.trace.length - 1 - system_turn
    assert policy.scheduler.pool.rows_in_use == 0 and policy.scheduler.pool.session is None


def test_questions_past_the_row_limit_wait_in_order_of_arrival(engine, sqlite_db, monkeypatch):
    monkeypatch.setattr(scheduler, "DECODE_CHUNK_TOKENS", 8)
    policy = limited_policy(engine, 2)
    log = BatchLog(monkeypatch)
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=7))
    answers: dict = {}
    threads = [ask_in_thread(Agent(sqlite_db, policy, config), f"question {n}?", answers) for n in range(5)]
    for thread in threads:
        thread.join(GUARD_S)
    assert sorted(answers) == [f"question {n}?" for n in range(5)]
    assert all(a.ending == "no_sql" for a in answers.values())
    assert log.most_rows == 2
    assert policy.scheduler.pool.rows_in_use == 0


def test_samples_of_a_question_need_rows_of_their_own(engine, sqlite_db):
    policy = limited_policy(engine, 2)
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=2), samples=3)
    # More samples than the limit: the question runs alone, with all its rows.
    answer = Agent(sqlite_db, policy, config).ask("How many employees?")
    assert len(answer.episodes) == 3 and sum(v["count"] for v in answer.votes) == 3
    assert policy.scheduler.pool.rows_in_use == 0


def test_a_question_cancelled_while_waiting_for_rows_leaves_the_line_at_once(engine, sqlite_db, monkeypatch):
    policy = limited_policy(engine, 1)
    go = threading.Event()
    BatchLog(monkeypatch, lambda pool, parts: go.wait(GUARD_S))  # the first question holds the engine
    config = AgentConfig(token_budget=BUDGET, sampling=SamplingParams(seed=7))
    answers: dict = {}
    first = ask_in_thread(Agent(sqlite_db, policy, config), "first?", answers)
    wait_for(lambda: policy.scheduler.pool.rows_in_use == 1, "first question holding the row")
    cancel = CancelEvent()
    outcome: dict = {}

    def ask_second() -> None:
        try:
            Agent(sqlite_db, policy, config).ask("second?", cancel=cancel)
        except Cancelled as error:
            outcome["cancelled"] = error

    second = threading.Thread(target=ask_second)
    second.start()
    wait_for(lambda: policy.scheduler.waiting == 1, "second question waiting for rows")
    cancel.set()
    second.join(GUARD_S)
    assert "cancelled" in outcome and not go.is_set()  # it left while the engine was still busy
    go.set()
    first.join(GUARD_S)
    assert answers["first?"].ending == "no_sql"
    assert Agent(sqlite_db, policy, config).ask("third?").ending == "no_sql"
    assert policy.scheduler.pool.rows_in_use == 0

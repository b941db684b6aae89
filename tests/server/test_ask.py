"""ask_database end to end with scripted model replies: answers, progress, queueing, cancellation."""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from mcp import Client

from mcp_server.agent.errors import EndpointError, ModelOutOfMemoryError
from mcp_server.model_runner import ModelRunner
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.fixture_schema import ORDERS_PER_STATUS
from tests.server.conftest import fenced_body
from tests.server.scripted_policies import SCRIPT, GatedPolicy, byte_replay

pytestmark = pytest.mark.anyio


def server_with(shop_db, policy, **settings) -> object:
    settings = Settings(max_rows=100, **settings)
    return build_server(settings, shop_db, ModelRunner(settings, shop_db, policy))


async def test_ask_database_returns_sql_rows_trace_and_progress(shop_db):
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    async with Client(server_with(shop_db, byte_replay(SCRIPT))) as client:
        result = await client.call_tool(
            "ask_database", {"question": "How many orders per status?"}, progress_callback=on_progress
        )
    assert not result.is_error, result.content[0].text
    answer = result.structured_content
    assert answer["rows"] == ORDERS_PER_STATUS
    assert answer["columns"] == ["status", "n"]
    assert answer["ending"] == "submit_sql"
    assert answer["sql_dialect"] == shop_db.dialect
    assert answer["trace"][0] == "round 1: list_tables {}"
    assert len(answer["trace"]) == 3
    assert [p[0] for p in progress] == [1, 2] and progress[0][1] == progress[1][1] >= 6
    assert "2 tool calls" in progress[0][2]
    body = fenced_body(result.content[0].text)
    assert "pending | 7" in body and "GROUP BY status" in body


async def test_without_a_model_ask_explains_and_the_other_tools_work(shop_server):
    async with Client(shop_server) as client:
        result = await client.call_tool("ask_database", {"question": "How many orders?"})
        other = await client.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM orders"})
    assert result.is_error
    text = result.content[0].text
    assert "--model DIR" in text and "SQLSCOUT_MODEL" in text and "--endpoint" in text
    assert not other.is_error


async def test_questions_past_the_limit_wait_their_turn(shop_db):
    policy = GatedPolicy(SCRIPT)
    answers = []
    async with Client(server_with(shop_db, policy, max_concurrent_questions=2)) as client:

        async def ask() -> None:
            answers.append(await client.call_tool("ask_database", {"question": "orders per status?"}))

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(ask)
            await anyio.sleep(0.3)
            # Meanwhile the database tools are not held up by the waiting questions.
            quick = await client.call_tool("run_query", {"sql": "SELECT 1 AS one"})
            assert quick.structured_content["rows"] == [[1]]
            policy.gate.set()
    assert [a.structured_content["rows"] for a in answers] == [ORDERS_PER_STATUS] * 3
    assert policy.most_active == 2


async def test_cancelling_a_question_stops_the_episode_and_frees_the_model(shop_db):
    policy = GatedPolicy(SCRIPT)
    async with Client(server_with(shop_db, policy)) as client:
        with anyio.move_on_after(0.5) as scope:
            await client.call_tool("ask_database", {"question": "orders per status?"})
        assert scope.cancelled_caught
        with anyio.fail_after(10):
            while not policy.saw_cancel.is_set():
                await anyio.sleep(0.05)
        policy.gate.set()
        after = await client.call_tool("ask_database", {"question": "orders per status?"})
    assert after.structured_content["ending"] == "submit_sql"


async def test_a_model_that_fails_to_load_is_reported_per_question(shop_db, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    settings = Settings(model=str(tmp_path))  # exists, but holds no checkpoint
    async with Client(build_server(settings, shop_db)) as client:
        first = await client.call_tool("ask_database", {"question": "How many orders?"})
        other = await client.call_tool("list_tables", {})
    assert first.is_error
    assert f"loading the model from {tmp_path} failed" in first.content[0].text
    assert other.structured_content["total"] == len(shop_db.tables())


class FailingOncePolicy:
    """A replay policy whose first completion fails with `error`, as a model that breaks mid-question."""

    def __init__(self, script: list[str], error: Exception) -> None:
        self.inner = byte_replay(script)
        self.name, self.prompts, self.chat = "failing", self.inner.prompts, self.inner.chat
        self.error = error
        self.failed = False

    def start(self, prompt: str, samples: int, max_tokens: int):
        run = self.inner.start(prompt, samples, max_tokens)
        original = run.complete

        def complete(rows, max_new_tokens, sampling, cancel=None):
            if not self.failed:
                self.failed = True
                raise self.error
            return original(rows, max_new_tokens, sampling, cancel)

        run.complete = complete
        return run

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "error",
    [
        EndpointError(
            "the model endpoint http://gpu:8000/v1/completions refused the API key (HTTP 401): check it"
        ),
        ModelOutOfMemoryError("the local model ran out of memory on cuda:0 (CUDA out of memory): lower it"),
    ],
    ids=["endpoint", "out-of-memory"],
)
async def test_a_model_failing_mid_question_is_one_clear_error_and_the_next_question_works(
    shop_db, error, caplog
):
    async with Client(server_with(shop_db, FailingOncePolicy(SCRIPT, error))) as client:
        with caplog.at_level(logging.INFO):
            failed = await client.call_tool("ask_database", {"question": "orders per status?"})
        after = await client.call_tool("ask_database", {"question": "orders per status?"})
    assert failed.is_error
    assert (
        failed.content[0].text
        == f"Error executing tool ask_database: {error}\nThe other tools work without a model."
    )
    assert [r.levelname for r in caplog.records] == ["INFO"] and not caplog.records[0].exc_info
    assert str(error) in caplog.records[0].getMessage()
    assert after.structured_content["rows"] == ORDERS_PER_STATUS


def test_a_model_that_fails_to_load_in_the_background_is_one_line(shop_db, tmp_path, caplog):
    (tmp_path / "config.json").write_text("{}")
    runner = ModelRunner(Settings(model=str(tmp_path)), shop_db)
    with caplog.at_level(logging.INFO):
        runner.preload_in_background()
        deadline = time.monotonic() + 30
        while not any(r.levelno >= logging.WARNING for r in caplog.records):
            assert time.monotonic() < deadline, "the failed load was not logged"
            time.sleep(0.05)
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"loading the model from {tmp_path} failed" in warning.getMessage()
    assert "ask_database will try again" in warning.getMessage()
    assert not [r for r in caplog.records if r.exc_info]

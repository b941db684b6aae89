"""Questions asked at once: they run side by side up to --max-concurrent-questions, later ones wait their turn
in order of arrival holding no thread, the database tools stay responsive, a waiting question can be
cancelled, and progress notifications reach only their own question."""

from __future__ import annotations

import threading

import anyio
import pytest
from mcp import Client

from mcp_server.model_runner import ModelRunner
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.fixture_schema import ORDERS_PER_STATUS
from tests.server.scripted_policies import SCRIPT, GatedPolicy, byte_replay

pytestmark = pytest.mark.anyio

# A stuck question fails the test here instead of hanging the run.
GUARD_S = 30.0


def runner_and_server(shop_db, policy, **settings):
    settings = Settings(max_rows=100, **settings)
    runner = ModelRunner(settings, shop_db, policy)
    return runner, build_server(settings, shop_db, runner)


async def until(condition, what: str) -> None:
    with anyio.move_on_after(GUARD_S):
        while not condition():
            await anyio.sleep(0.01)
        return
    pytest.fail(f"no {what} within {GUARD_S:g} s")


async def test_questions_run_side_by_side(shop_db):
    policy = GatedPolicy(SCRIPT)
    _, server = runner_and_server(shop_db, policy)
    answers = []
    async with Client(server) as client:

        async def ask() -> None:
            answers.append(await client.call_tool("ask_database", {"question": "orders per status?"}))

        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(ask)
            await until(lambda: policy.active == 4, "four questions writing at once")
            policy.gate.set()
    assert [a.structured_content["rows"] for a in answers] == [ORDERS_PER_STATUS] * 4


async def test_a_burst_waits_in_order_of_arrival_without_holding_threads_or_the_tools(shop_db):
    limit, burst = 4, 50
    policy = GatedPolicy(SCRIPT)
    runner, server = runner_and_server(shop_db, policy, max_concurrent_questions=limit)
    answers: dict[int, object] = {}
    async with Client(server) as client:
        threads_before = threading.active_count()

        async def ask(number: int) -> None:
            answers[number] = await client.call_tool("ask_database", {"question": f"question {number}?"})

        async with anyio.create_task_group() as group:
            for number in range(burst):
                group.start_soon(ask, number)
                if number < limit:
                    await until(lambda n=number: len(policy.started) == n + 1, f"question {number} started")
                else:
                    waiting = number - limit + 1
                    await until(lambda w=waiting: runner.threads.statistics().tasks_waiting == w, "queued")
            # More questions than AnyIO has worker threads wait, and the database tools still answer.
            assert threading.active_count() <= threads_before + limit + 2
            with anyio.fail_after(GUARD_S):
                quick = await client.call_tool("run_query", {"sql": "SELECT 1 AS one"})
            assert quick.structured_content["rows"] == [[1]]
            assert policy.most_active == limit
            policy.gate.set()
    assert sorted(answers) == list(range(burst))
    assert all(a.structured_content["rows"] == ORDERS_PER_STATUS for a in answers.values())
    started = [next(n for n in range(burst) if f"question {n}?" in p) for p in policy.started]
    assert sorted(started) == list(range(burst))
    # Questions start in order of arrival; those let in together may begin in any order among themselves.
    assert all(abs(position - number) < limit for position, number in enumerate(started)), started
    assert policy.most_active == limit


async def test_a_waiting_question_can_be_cancelled_and_never_starts(shop_db):
    policy = GatedPolicy(SCRIPT)
    runner, server = runner_and_server(shop_db, policy, max_concurrent_questions=1)
    async with Client(server) as client:
        async with anyio.create_task_group() as group:
            first = []

            async def ask_first() -> None:
                first.append(await client.call_tool("ask_database", {"question": "first?"}))

            group.start_soon(ask_first)
            await until(lambda: len(policy.started) == 1, "the first question started")
            with anyio.move_on_after(0.5) as waited:
                await client.call_tool("ask_database", {"question": "second?"})
            assert waited.cancelled_caught
            await until(
                lambda: runner.threads.statistics().tasks_waiting == 0, "the second one left the line"
            )
            policy.gate.set()
        third = await client.call_tool("ask_database", {"question": "third?"})
    assert first[0].structured_content["rows"] == third.structured_content["rows"] == ORDERS_PER_STATUS
    assert ["first?" in p for p in policy.started] == [True, False]
    assert "third?" in policy.started[1]


async def test_cancelling_a_running_question_lets_the_next_one_in(shop_db):
    policy = GatedPolicy(SCRIPT)
    _, server = runner_and_server(shop_db, policy, max_concurrent_questions=1)
    async with Client(server) as client:
        async with anyio.create_task_group() as group:
            with anyio.move_on_after(0.5):
                await client.call_tool("ask_database", {"question": "first?"})
            second = []

            async def ask_second() -> None:
                second.append(await client.call_tool("ask_database", {"question": "second?"}))

            group.start_soon(ask_second)
            # The gate is still shut: only the cancel of the first question lets the second one start.
            await until(lambda: len(policy.started) == 2, "the second question started")
            policy.gate.set()
    assert policy.saw_cancel.is_set()
    assert second[0].structured_content["rows"] == ORDERS_PER_STATUS


async def test_progress_reaches_only_its_own_question(shop_db):
    _, server = runner_and_server(shop_db, byte_replay(SCRIPT))
    progress: dict[int, list[float]] = {n: [] for n in range(3)}
    async with Client(server) as client:

        async def ask(number: int) -> None:
            async def on_progress(done, total, message) -> None:
                progress[number].append(done)

            result = await client.call_tool(
                "ask_database", {"question": f"question {number}?"}, progress_callback=on_progress
            )
            assert result.structured_content["rows"] == ORDERS_PER_STATUS

        async with anyio.create_task_group() as group:
            for number in progress:
                group.start_soon(ask, number)
    assert progress == {n: [1, 2] for n in progress}

"""Many questions to one HTTP server on a model endpoint: eight at once take about the time of one, a burst of
50 gets every answer right while the database tools keep answering, and a question cancelled while it waits
its turn never reaches the endpoint."""

from __future__ import annotations

import re
import threading
import time
from contextlib import AsyncExitStack

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.completions_server import HOLD, CompletionsServer, completion
from tests.server.conftest import ServerProcess, free_port, subprocess_env

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# The scripted endpoint's time per completion, as a model writing a reply.
COMPLETION_S = 1.0
GUARD_S = 60.0
QUESTION = re.compile(r"question (\d+)\?")


def answer_for(body: dict) -> tuple[int, dict]:
    """Submit `SELECT N AS n` for the prompt's `question N?`, so that every answer says whose it is."""
    number = QUESTION.findall(body["prompt"])[-1]
    return completion(
        f'</think>\n{{"tool": "submit_sql", "args": {{"sql": "SELECT {number} AS n"}}}}', 300, 20
    )


@pytest.fixture(scope="module")
def endpoint_port() -> int:
    return free_port()


def serve(dsn: str, endpoint_port: int, *args: str) -> ServerProcess:
    env = subprocess_env(SQLSCOUT_ENDPOINT=f"http://127.0.0.1:{endpoint_port}", SQLSCOUT_ENDPOINT_MODEL="m")
    return ServerProcess("--dsn", dsn, *args, env=env)


@pytest.fixture(scope="module")
def server(sqlite_dsn, endpoint_port):
    process = serve(sqlite_dsn, endpoint_port)
    yield process
    process.stop()


async def requests_reach(endpoint: CompletionsServer, count: int) -> None:
    with anyio.fail_after(GUARD_S):
        while len(endpoint.requests) < count:
            await anyio.sleep(0.02)


async def ask(url: str, number: int) -> int:
    """Ask `question N?` over a session of its own; returns the answer's n."""
    with anyio.fail_after(GUARD_S):
        async with Client(streamable_http_client(url)) as client:
            result = await client.call_tool("ask_database", {"question": f"question {number}?"})
    assert not result.is_error, result.content[0].text
    return result.structured_content["rows"][0][0]


async def timed_questions(clients: list[Client], first: int) -> tuple[float, dict[int, int]]:
    """Ask one question on each client at once, numbered from `first`: the time they took, and the answers."""
    answers: dict[int, int] = {}

    async def one(client: Client, number: int) -> None:
        result = await client.call_tool("ask_database", {"question": f"question {number}?"})
        assert not result.is_error, result.content[0].text
        answers[number] = result.structured_content["rows"][0][0]

    started = time.monotonic()
    with anyio.fail_after(GUARD_S):
        async with anyio.create_task_group() as group:
            for number, client in enumerate(clients, first):
                group.start_soon(one, client, number)
    return time.monotonic() - started, answers


async def test_eight_questions_at_once_take_under_twice_the_time_of_one(server, endpoint_port):
    with CompletionsServer([], port=endpoint_port, respond=answer_for, delay_s=COMPLETION_S) as endpoint:
        async with AsyncExitStack() as stack:
            # Eight users' sessions, opened beforehand: what is timed is answering, not connecting.
            clients = [
                await stack.enter_async_context(Client(streamable_http_client(server.url))) for _ in range(8)
            ]
            await timed_questions(clients[:1], 100)  # the first question pays the server's own warm-up
            one_s, one = await timed_questions(clients[:1], 0)
            eight_s, eight = await timed_questions(clients, 1)
    assert one == {0: 0} and eight == {n: n for n in range(1, 9)}
    assert len(endpoint.requests) == 10
    assert eight_s < 2 * one_s, f"8 questions took {eight_s:.2f} s, one {one_s:.2f} s"


async def test_a_burst_of_50_is_answered_while_the_tools_keep_working(server, endpoint_port):
    release = threading.Event()

    def held_answer(body: dict) -> tuple[int, dict]:
        release.wait(GUARD_S)
        return answer_for(body)

    burst = 50  # more than AnyIO's 40 worker threads, which the database tools share
    with CompletionsServer([], port=endpoint_port, respond=held_answer) as endpoint:
        answers: dict[int, int] = {}

        async def one(number: int) -> None:
            answers[number] = await ask(server.url, number)

        async with anyio.create_task_group() as group:
            for number in range(burst):
                group.start_soon(one, number)
            await requests_reach(endpoint, 8)
            await anyio.sleep(1.0)  # the rest of the burst reaches the server and waits its turn
            with anyio.fail_after(GUARD_S):
                async with Client(streamable_http_client(server.url)) as client:
                    quick = await client.call_tool("run_query", {"sql": "SELECT 1 AS one"})
            assert quick.structured_content["rows"] == [[1]]
            assert len(endpoint.requests) == 8  # the default --max-concurrent-questions
            release.set()
    assert answers == {n: n for n in range(burst)}
    assert endpoint.most_in_flight == 8


async def test_a_question_cancelled_while_waiting_never_reaches_the_endpoint(sqlite_dsn, endpoint_port):
    server = serve(sqlite_dsn, endpoint_port, "--max-concurrent-questions", "1")
    try:
        with CompletionsServer([HOLD], port=endpoint_port, respond=answer_for) as endpoint:
            async with anyio.create_task_group() as group:
                group.start_soon(ask, server.url, 1)
                await requests_reach(endpoint, 1)
                with anyio.move_on_after(1.0):  # waits behind the first question, then its client leaves
                    await ask(server.url, 2)
                group.cancel_scope.cancel()  # the first question's client leaves too
            with anyio.fail_after(GUARD_S):
                while endpoint.hung_up < 1:
                    await anyio.sleep(0.05)
            assert await ask(server.url, 3) == 3
        prompts = [QUESTION.findall(r["body"]["prompt"])[-1] for r in endpoint.requests]
        assert prompts == ["1", "3"]
    finally:
        server.stop()

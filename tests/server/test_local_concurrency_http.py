"""Many questions to one HTTP server on the local engine (a tiny random checkpoint on the CPU): questions asked
at once share the batch up to --max-batch-rows rows while the others wait, and a question whose client leaves
mid-reply gives its rows back while the rest are answered."""

from __future__ import annotations

import re
from contextlib import AsyncExitStack

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.server.conftest import ServerProcess, subprocess_env

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GUARD_S = 120.0
# One reply of the random model fills what the 380-token prompt leaves of the budget: about 130 tokens, a few
# seconds on the CPU, so that questions sent together overlap; no second round fits.
BUDGET = 512
ROWS_IN_USE = re.compile(
    r"a question (joined|left) the batch: (\d+) of 2 rows in use, (\d+) questions waiting"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir, sqlite_dsn):
    args = ("--dsn", sqlite_dsn, "--model", str(tiny_model_dir), "--device", "cpu", "--max-batch-rows", "2")
    process = ServerProcess(*args, "--token-budget", str(BUDGET), env=subprocess_env())
    yield process
    process.stop()


def batch_events(server: ServerProcess, since: int) -> list[tuple[str, int, int]]:
    return [
        (found[1], int(found[2]), int(found[3]))
        for line in server.stderr_lines[since:]
        if (found := ROWS_IN_USE.search(line))
    ]


async def ask(client: Client, number: int) -> dict:
    result = await client.call_tool("ask_database", {"question": f"question {number}?"})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_questions_share_the_batch_up_to_the_row_limit(server):
    since = len(server.stderr_lines)
    answers: dict[int, dict] = {}
    with anyio.fail_after(GUARD_S):
        async with AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(Client(streamable_http_client(server.url))) for _ in range(4)
            ]

            async def one(number: int) -> None:
                answers[number] = await ask(clients[number], number)

            async with anyio.create_task_group() as group:
                for number in range(4):
                    group.start_soon(one, number)
    assert sorted(answers) == [0, 1, 2, 3]
    assert all(answer["ending"] == "no_sql" for answer in answers.values())
    events = batch_events(server, since)
    assert [e for e in events if e[0] == "joined"] and max(rows for _, rows, _ in events) == 2
    assert any(waiting > 0 for _, _, waiting in events), events  # the third and fourth waited for rows
    assert events[-1][:2] == ("left", 0)


async def test_a_client_leaving_mid_reply_gives_its_rows_back(server):
    since = len(server.stderr_lines)

    async def leave_once_both_decode(scope: anyio.CancelScope) -> None:
        while ("joined", 2, 0) not in batch_events(server, since):
            await anyio.sleep(0.02)
        scope.cancel()

    with anyio.fail_after(GUARD_S):
        async with Client(streamable_http_client(server.url)) as staying:
            async with anyio.create_task_group() as group:
                answers = []

                async def stay() -> None:
                    answers.append(await ask(staying, 1))

                group.start_soon(stay)
                with anyio.CancelScope() as leaving_scope:
                    async with anyio.create_task_group() as watching:
                        watching.start_soon(leave_once_both_decode, leaving_scope)
                        async with Client(streamable_http_client(server.url)) as leaving:
                            await ask(leaving, 2)
    assert answers and answers[0]["ending"] == "no_sql"
    events = batch_events(server, since)
    assert [e[:2] for e in events if e[0] == "left"] == [("left", 1), ("left", 0)], events
    # Only the question that stayed finished its reply.
    assert sum("round 1:" in line for line in server.stderr_lines[since:]) == 1

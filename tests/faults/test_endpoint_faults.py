"""The model endpoint failing under the HTTP server: down, dying after a 500, refusing the key, answering with
an error or with something that is not a completion, too slow. The client gets one message that names the
endpoint, what failed and what to do, within a bounded time; the server logs it in one line without a
traceback; and the next question, once the endpoint answers again, gets its answer."""

from __future__ import annotations

import time

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.completions_server import DIE, HOLD, CompletionsServer, completion
from tests.fixture_schema import fixture_rows
from tests.server.conftest import ServerProcess, free_port, subprocess_env

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ANSWER = completion(
    '</think>\n{"tool": "submit_sql", "args": {"sql": "SELECT COUNT(*) AS n FROM orders"}}', 300, 20
)
# One retry, 1 s after the first attempt, and 1 s for a reply: every failure here is over in a few seconds.
RETRIES = 1
TIMEOUT_S = 1
API_KEY = "sk-wrong"
# How long a failing question may take to be reported: the retry's 1 s backoff, a client session and a busy
# test machine; a question that hangs is failed at HANG_GUARD_S instead of holding up the run.
REPORTED_WITHIN_S = 10.0
HANG_GUARD_S = 30.0


@pytest.fixture(scope="module")
def endpoint_port() -> int:
    """Where the scripted endpoint listens, when a test starts it: the server is told this address."""
    return free_port()


@pytest.fixture(scope="module")
def server(sqlite_dsn, endpoint_port):
    env = subprocess_env(
        SQLSCOUT_ENDPOINT=f"http://127.0.0.1:{endpoint_port}",
        SQLSCOUT_ENDPOINT_MODEL="m",
        SQLSCOUT_API_KEY=API_KEY,
        SQLSCOUT_ENDPOINT_RETRIES=str(RETRIES),
        SQLSCOUT_ENDPOINT_TIMEOUT=str(TIMEOUT_S),
    )
    process = ServerProcess("--dsn", sqlite_dsn, env=env)
    yield process
    process.stop()


async def ask(server: ServerProcess) -> tuple[CallToolResult, float]:
    """One question over a fresh client session: its result and how long it took."""
    started = time.monotonic()
    with anyio.fail_after(HANG_GUARD_S):
        async with Client(streamable_http_client(server.url)) as client:
            result = await client.call_tool("ask_database", {"question": "How many orders?"})
    return result, time.monotonic() - started


async def fails_clearly(
    server: ServerProcess, endpoint_url: str, *phrases: str, path: str = "/v1/completions"
) -> str:
    """Ask, and check the failure: the phrases and the URL that failed (`path` of the endpoint) in the client's
    message, in time, in one log line without a traceback. Returns the message."""
    completions_url = f"{endpoint_url}{path}"
    logged_before = len(server.stderr_lines)
    result, elapsed = await ask(server)
    text = result.content[0].text
    assert result.is_error, text
    for phrase in (completions_url, *phrases):
        assert phrase in text
    assert elapsed < REPORTED_WITHIN_S, f"reported after {elapsed:.1f} s"
    with anyio.fail_after(5):  # the server's stderr comes through a pipe, read by a thread
        while not any(completions_url in line for line in server.stderr_lines[logged_before:]):
            await anyio.sleep(0.05)
    await anyio.sleep(0.2)  # for any line that would follow
    logged = server.stderr_lines[logged_before:]
    mentions = [line for line in logged if completions_url in line]
    assert len(mentions) == 1 and "Tool 'ask_database' failed" in mentions[0], logged
    assert not [line for line in logged if "Traceback" in line], logged
    return text


async def answers(server: ServerProcess) -> None:
    result, elapsed = await ask(server)
    assert not result.is_error, result.content[0].text
    assert result.structured_content["rows"] == [[len(fixture_rows()["orders"])]]
    assert elapsed < REPORTED_WITHIN_S


async def test_endpoint_down_then_back(server, endpoint_port):
    """Down from the start: the endpoint is asked for its models before the model is called ready, and the
    question fails at once on that, without the retries of a completion."""
    url = f"http://127.0.0.1:{endpoint_port}"
    # The load the server started in the background fails on its own, in a line of its own: once it has, the
    # question's failure is the only line that follows.
    with anyio.fail_after(HANG_GUARD_S):
        while not any("ask_database will try again" in line for line in server.stderr_lines):
            await anyio.sleep(0.05)
    await fails_clearly(server, url, "does not answer (connection refused)", "--endpoint", path="/v1/models")
    with CompletionsServer([ANSWER], port=endpoint_port):
        await answers(server)


async def test_endpoint_answers_500_then_dies(server, endpoint_port):
    with CompletionsServer(
        [(500, {"error": {"message": "engine crashed"}}), DIE], port=endpoint_port
    ) as dying:
        await fails_clearly(server, dying.url, "connection refused", "gave up after 2 attempts")
    assert len(dying.requests) == 1  # the retry found the port closed
    with CompletionsServer([ANSWER], port=endpoint_port):
        await answers(server)


async def test_a_refused_key_is_not_retried(server, endpoint_port):
    with CompletionsServer(
        [(401, {"error": {"message": "invalid key"}}), ANSWER], port=endpoint_port
    ) as endpoint:
        await fails_clearly(
            server, endpoint.url, "refused the API key (HTTP 401): check --api-key / SQLSCOUT_API_KEY"
        )
        assert [r["auth"] for r in endpoint.requests] == [f"Bearer {API_KEY}"]
        await answers(server)


@pytest.mark.parametrize(
    ("replies", "phrases"),
    [
        pytest.param(
            [(500, {"error": {"message": "CUDA error: device-side assert"}})] * 2,
            ["HTTP 500: CUDA error: device-side assert", "gave up after 2 attempts", "own log"],
            id="500-twice",
        ),
        pytest.param(
            [(404, {"error": {"message": "The model `m` does not exist."}})],
            ["HTTP 404: The model `m` does not exist.", "--endpoint-model"],
            id="unknown-model",
        ),
        pytest.param(
            [(200, "<html>Welcome to nginx!</html>")],
            ["did not answer with a completion", "not JSON", "nginx", "vLLM"],
            id="not-json",
        ),
        pytest.param(
            [(200, {"object": "list", "data": []})],
            ["did not answer with a completion", "no choices"],
            id="no-choices",
        ),
    ],
)
async def test_an_error_reply_says_what_the_endpoint_said(server, endpoint_port, replies, phrases):
    with CompletionsServer([*replies, ANSWER], port=endpoint_port) as endpoint:
        await fails_clearly(server, endpoint.url, *phrases)
        assert len(endpoint.requests) == len(replies)
        await answers(server)


async def test_a_slow_endpoint_times_out_once(server, endpoint_port):
    with CompletionsServer([HOLD, ANSWER], port=endpoint_port) as endpoint:
        await fails_clearly(
            server, endpoint.url, f"did not answer within {TIMEOUT_S} s", "--endpoint-timeout"
        )
        # Given up on, not retried: a server too slow once is as slow for the retry.
        assert (len(endpoint.requests), endpoint.hung_up) == (1, 1)
        await answers(server)

"""Clients that stop waiting in the middle of a question: one that cancels it, one whose HTTP connection
drops, one that closes the pipes of a stdio server. The model stops at once (the request in flight is cut
off and no other reaches the endpoint), the next question is answered, and a stdio server that lost its
client ends quietly with status 0."""

from __future__ import annotations

import json
import subprocess
import time

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.completions_server import HOLD, CompletionsServer, completion
from tests.fixture_schema import fixture_rows
from tests.server.conftest import (
    INITIALIZE,
    MCP_HEADERS,
    PROJECT_ROOT,
    SERVER_COMMAND,
    ServerProcess,
    free_port,
    subprocess_env,
)

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ANSWER = completion(
    '</think>\n{"tool": "submit_sql", "args": {"sql": "SELECT COUNT(*) AS n FROM orders"}}', 300, 20
)
ASK = {"name": "ask_database", "arguments": {"question": "How many orders?"}}
# How soon the request in flight must be cut off once the client has left (it takes well under a second),
# how long to watch the endpoint afterwards for requests that should not come, how soon the next question
# must be answered and a stdio server must exit; what hangs is failed at HANG_GUARD_S.
CUT_OFF_WITHIN_S = 3.0
QUIET_FOR_S = 1.0
ANSWERED_WITHIN_S = 10.0
EXITED_WITHIN_S = 8.0
HANG_GUARD_S = 30.0
STDIO_TRIES = 5


@pytest.fixture(scope="module")
def endpoint_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def server(sqlite_dsn, endpoint_port):
    env = subprocess_env(SQLSCOUT_ENDPOINT=f"http://127.0.0.1:{endpoint_port}", SQLSCOUT_ENDPOINT_MODEL="m")
    process = ServerProcess("--dsn", sqlite_dsn, env=env)
    yield process
    process.stop()


class HandMadeSession:
    """An MCP session over streamable HTTP spoken by hand, to keep a call's connection open while sending a
    cancel, or to drop it as a client that is killed does."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(timeout=HANG_GUARD_S)
        reply = self.http.post(url, json=INITIALIZE, headers=MCP_HEADERS)
        self.headers = {
            **MCP_HEADERS,
            "mcp-session-id": reply.headers["mcp-session-id"],
            "mcp-protocol-version": INITIALIZE["params"]["protocolVersion"],
        }
        self.notify("notifications/initialized")

    def notify(self, method: str, params: dict | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
        self.http.post(self.url, json=message, headers=self.headers).raise_for_status()

    def start_call(self, request_id: int, params: dict) -> httpx.Response:
        """Send tools/call and return at once, with the response's event stream left open."""
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        request = self.http.build_request("POST", self.url, json=message, headers=self.headers)
        return self.http.send(request, stream=True)

    def close(self) -> None:
        self.http.close()


def wait_until(condition, timeout_s: float, what: str) -> float:
    """Seconds until `condition()` held; fails after `timeout_s`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"{what} not within {timeout_s} s"
        time.sleep(0.01)
    return time.monotonic() - started


def stops_at_once(endpoint: CompletionsServer) -> None:
    """The request in flight is cut off soon, and no other follows it."""
    wait_until(lambda: endpoint.hung_up == 1, CUT_OFF_WITHIN_S, "the cut-off of the request in flight")
    time.sleep(QUIET_FOR_S)
    assert len(endpoint.requests) == 1


async def answers(server: ServerProcess) -> None:
    started = time.monotonic()
    with anyio.fail_after(HANG_GUARD_S):
        async with Client(streamable_http_client(server.url)) as client:
            result = await client.call_tool(ASK["name"], ASK["arguments"])
    assert not result.is_error, result.content[0].text
    assert result.structured_content["rows"] == [[len(fixture_rows()["orders"])]]
    assert time.monotonic() - started < ANSWERED_WITHIN_S


async def test_a_cancelled_question_sends_no_more_completion_requests(server, endpoint_port):
    with CompletionsServer([HOLD, ANSWER], port=endpoint_port) as endpoint:
        session = HandMadeSession(server.url)
        call = session.start_call(7, ASK)
        try:
            endpoint.wait_for_requests(1)
            session.notify("notifications/cancelled", {"requestId": 7, "reason": "changed my mind"})
            stops_at_once(endpoint)
        finally:
            call.close()
            session.close()
        await answers(server)
        assert len(endpoint.requests) == 2


async def test_an_http_client_that_disconnects_stops_its_question(server, endpoint_port):
    with CompletionsServer([HOLD, ANSWER], port=endpoint_port) as endpoint:
        session = HandMadeSession(server.url)
        call = session.start_call(2, ASK)
        endpoint.wait_for_requests(1)
        logged_before = len(server.stderr_lines)
        call.close()
        session.close()  # the connection closes as a killed client's does: no cancel, no session end
        stops_at_once(endpoint)
        assert any("the client disconnected" in line for line in server.stderr_lines[logged_before:])
        await answers(server)
        assert len(endpoint.requests) == 2


def send(process: subprocess.Popen, message: dict) -> None:
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def start_stdio_server(dsn: str, endpoint: CompletionsServer) -> subprocess.Popen:
    """The server over stdio, sent the handshake and a question (it reads them once it has started)."""
    env = subprocess_env(SQLSCOUT_ENDPOINT=endpoint.url, SQLSCOUT_ENDPOINT_MODEL="m")
    server = subprocess.Popen(
        [*SERVER_COMMAND, "--dsn", dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=PROJECT_ROOT,
    )
    send(server, INITIALIZE)
    send(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    send(server, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ASK})
    return server


def hang_up(server: subprocess.Popen, endpoint: CompletionsServer) -> tuple[int, float, str]:
    """Close both pipes once the model is writing; the exit status, how long the exit took, and stderr."""
    try:
        assert json.loads(server.stdout.readline())["id"] == 1
        endpoint.wait_for_requests(1)
        hung_up = time.monotonic()
        server.stdin.close()
        server.stdout.close()
        status = server.wait(timeout=HANG_GUARD_S)
        return status, time.monotonic() - hung_up, server.stderr.read().decode()
    finally:
        server.kill()
        server.stderr.close()


@pytest.mark.parametrize("attempt", range(STDIO_TRIES))
def test_a_stdio_client_that_hangs_up_mid_question_ends_the_server_quietly(sqlite_dsn, attempt):
    """Closing both pipes while the model writes: the race between the hang-up and the reply that is due
    (written to a closed pipe) goes either way, so the test runs several times."""
    with CompletionsServer([HOLD]) as endpoint:
        status, exited_after, stderr = hang_up(start_stdio_server(sqlite_dsn, endpoint), endpoint)
    assert status == 0, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert exited_after < EXITED_WITHIN_S, f"exited {exited_after:.1f} s after the hang-up"
    assert (len(endpoint.requests), endpoint.hung_up) == (1, 1)

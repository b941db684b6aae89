"""stdin and stdout served on the event loop (mcp_server.stdio_pipes), and the SDK's transport where they cannot
be: messages round-trip whole, stray output misses the wire, the end of input or a hang-up exits 0."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mcp import Client, StdioServerParameters

from tests.server.conftest import PROJECT_ROOT, SERVER_COMMAND, subprocess_env

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = pytest.mark.slow

PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
PONG = {"jsonrpc": "2.0", "id": 1, "result": {}}
HANG_GUARD_S = 60
# Exits 0 where stdin and stdout would be served on the event loop, 3 where the SDK's transport serves them.
PIPES_USABLE = "from mcp_server.stdio_pipes import pipes_usable; raise SystemExit(0 if pipes_usable() else 3)"
# A server whose tool prints to stdout and reads stdin, as a careless library might, and echoes a long text.
STRAY_SERVER = """
import sys
from mcp.server.mcpserver import MCPServer
from mcp_server.stdio_pipes import pipes_usable
from mcp_server.stdio_transport import serve_stdio

assert pipes_usable()
server = MCPServer("stray")

@server.tool()
def echo(text: str) -> str:
    print("stray output", flush=True)
    return text + sys.stdin.read()

serve_stdio(server, has_model=False)
"""


def run_python(code: str, **streams) -> int:
    return subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), cwd=PROJECT_ROOT, timeout=HANG_GUARD_S, **streams
    ).returncode


def test_pipes_are_served_on_the_loop_and_files_or_a_shared_stderr_are_not(tmp_path):
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    assert run_python(PIPES_USABLE, **pipes) == 0
    request = tmp_path / "request.jsonl"
    request.write_bytes(PING)
    with request.open("rb") as regular_file:
        assert run_python(PIPES_USABLE, **{**pipes, "stdin": regular_file}) == 3
    assert run_python(PIPES_USABLE, **{**pipes, "stderr": subprocess.STDOUT}) == 3


@pytest.mark.anyio
async def test_long_messages_round_trip_and_stray_output_misses_the_wire():
    server = StdioServerParameters(
        command=sys.executable, args=["-c", STRAY_SERVER], env=subprocess_env(), cwd=str(PROJECT_ROOT)
    )
    text = "long message " * 40_000  # past a pipe's buffer both ways
    async with Client(server) as client:
        for _ in range(3):
            result = await client.call_tool("echo", {"text": text})
            assert not result.is_error and result.content[0].text == text


def serve(dsn: str, cache_dir, stdin) -> subprocess.Popen:
    return subprocess.Popen(
        [*SERVER_COMMAND, "--dsn", dsn],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)),
        cwd=PROJECT_ROOT,
    )


def test_the_end_of_input_exits_0(sqlite_dsn, cache_dir):
    server = serve(sqlite_dsn, cache_dir, subprocess.PIPE)
    server.stdin.write(PING)
    server.stdin.flush()
    assert json.loads(server.stdout.readline()) == PONG
    server.stdin.close()
    assert server.wait(timeout=HANG_GUARD_S) == 0, server.stderr.read().decode()
    server.stdout.close()
    stderr = server.stderr.read().decode()
    server.stderr.close()
    assert "Traceback" not in stderr


def test_a_client_that_hangs_up_before_the_reply_ends_the_server_quietly(sqlite_dsn, cache_dir):
    server = serve(sqlite_dsn, cache_dir, subprocess.PIPE)
    server.stdin.write(PING)
    server.stdin.flush()
    assert json.loads(server.stdout.readline()) == PONG
    server.stdout.close()  # the reply to the next request has nowhere to go
    server.stdin.write(PING)
    server.stdin.close()
    assert server.wait(timeout=HANG_GUARD_S) == 0
    stderr = server.stderr.read().decode()
    server.stderr.close()
    assert "Traceback" not in stderr


def test_a_regular_file_on_stdin_is_served_by_the_sdk_transport(sqlite_dsn, cache_dir, tmp_path):
    request = tmp_path / "request.jsonl"
    request.write_bytes(PING)
    with request.open("rb") as regular_file:
        server = serve(sqlite_dsn, cache_dir, regular_file)
        stdout, stderr = server.communicate(timeout=HANG_GUARD_S)
    assert server.returncode == 0, stderr.decode()
    assert json.loads(stdout) == PONG

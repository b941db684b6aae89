"""`python -m mcp_server` typed in a terminal (a pseudo-terminal here) against the same command under a host."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys

import pytest

from mcp_server.stdio_transport import terminal_hint
from tests.server.conftest import PROJECT_ROOT, SERVER_COMMAND, subprocess_env

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = pytest.mark.slow


PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
PONG = {"jsonrpc": "2.0", "id": 1, "result": {}}
CTRL_C = b"\x03"
# Only guards against a hang (the bug this tests waited for Enter forever), not a measure of speed.
HANG_GUARD_S = 60
# Makes the pseudo-terminal on stdin the controlling terminal, as a login shell has one, so that Ctrl-C typed
# into it sends SIGINT through the terminal's line discipline; then becomes the server.
IN_TERMINAL_SESSION = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'mcp_server', *sys.argv[1:]])"
)
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")


def read_line(stream, timeout_s: float = HANG_GUARD_S) -> bytes:
    ready, _, _ = select.select([stream], [], [], timeout_s)
    assert ready, f"no output within {timeout_s} s"
    return stream.readline()


@pytest.fixture
def terminal():
    """A pseudo-terminal: the master end to type into, the slave end for the server's stdin."""
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


@pytest.mark.parametrize("loading_a_model", [False, True], ids=["no-model", "model-loading"])
def test_ctrl_c_in_a_terminal_ends_the_server_at_once(
    terminal, loading_a_model, sqlite_dsn, cache_dir, request
):
    master, slave = terminal
    args = ["--dsn", sqlite_dsn]
    if loading_a_model:  # the background loader must not keep the process alive either
        args += ["--model", str(request.getfixturevalue("tiny_model_dir")), "--device", "cpu"]
    server = subprocess.Popen(
        [sys.executable, "-c", IN_TERMINAL_SESSION, *args],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)),
        cwd=PROJECT_ROOT,
        start_new_session=True,
    )
    try:
        os.write(master, PING)
        # The answer shows the server is reading the terminal: where Ctrl-C used to wait for the next Enter.
        answer = read_line(server.stdout)
        assert answer, server.stderr.read().decode()  # the server ended before answering: say why
        assert json.loads(answer) == PONG
        os.write(master, CTRL_C)
        status = server.wait(timeout=HANG_GUARD_S)
    finally:
        server.kill()
        server.stdout.close()
    stderr = server.stderr.read().decode()
    server.stderr.close()
    assert status == 130, stderr
    # Its commands name this Python by its full path: they work from a shell where the venv is not active.
    assert terminal_hint(loading_a_model) in stderr.splitlines()
    assert f"{sys.executable} -m mcp_server config" in terminal_hint(loading_a_model)
    # Without a model it offers nothing that would fail: `ask` only with one.
    assert " ask " not in terminal_hint(False) and f'{sys.executable} -m mcp_server ask "' in terminal_hint(
        True
    )
    assert "Traceback" not in stderr


def test_a_host_pipe_gets_only_the_protocol_and_logs(sqlite_dsn, cache_dir):
    done = subprocess.run(
        [*SERVER_COMMAND, "--dsn", sqlite_dsn],
        input=PING,
        capture_output=True,
        env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)),
        cwd=PROJECT_ROOT,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == PONG and done.stdout.count(b"\n") == 1
    stderr = done.stderr.decode()
    assert "MCP client" not in stderr
    assert all(LOG_LINE.match(line) for line in stderr.splitlines()), stderr

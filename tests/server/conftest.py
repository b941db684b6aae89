"""Fixtures of the server tests: the fixture database (tests/conftest.py) on every engine, and subprocess
helpers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from benchmarks.servers.ports import free_port
from tests.fixture_schema import ENGINES

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=ENGINES)
def shop_dsn(request) -> str:
    """The fixture database, whose shop tables these tests use, on each engine."""
    return request.getfixturevalue(f"{request.param}_dsn")


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a server subprocess: importable project, no SQLSCOUT_* leaking in from the caller but
    the test run's cache directory, so that no server a test starts writes to ~/.cache/sqlscout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLSCOUT_")}
    env["SQLSCOUT_CACHE_DIR"] = os.environ["SQLSCOUT_CACHE_DIR"]
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env.update(extra)
    return env


SERVER_COMMAND = [sys.executable, "-m", "mcp_server"]
# A client's first message, for tests that speak MCP by hand.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def stdio_client(*args: str, **env: str) -> Client:
    """A client of `python -m mcp_server ARGS` over stdio, started with `subprocess_env(**env)`."""
    command, *module = SERVER_COMMAND
    return Client(
        StdioServerParameters(
            command=command, args=[*module, *args], env=subprocess_env(**env), cwd=str(PROJECT_ROOT)
        )
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def shop_db(shop_dsn):
    from dbtools.engines import open_database

    db = open_database(shop_dsn, timeout_s=5.0, max_rows=100)
    yield db
    db.close()


@pytest.fixture
def shop_server(shop_db):
    """The server on the fixture database, without a model."""
    from mcp_server.server import build_server
    from mcp_server.settings import Settings

    return build_server(Settings(max_rows=100), shop_db)


def fenced_body(text: str) -> str:
    """What lies between the untrusted-data markers; asserts that both carry the same tag."""
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.startswith("BEGIN UNTRUSTED DATA "))
    tag = lines[begin].split()[3]
    assert lines[-1] == f"END UNTRUSTED DATA {tag}"
    return "\n".join(lines[begin + 1 : -1])


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """A cache directory (value indexes) for the servers these tests start."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def isolated_cache(cache_dir, monkeypatch) -> None:
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(cache_dir))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen3.5 checkpoint with the real tokenizer: the local engine runs it on the CPU."""
    from benchmarks.random_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model"))


class ServerProcess:
    """`python -m mcp_server --transport http ...` on a free loopback port, stopped on exit. Its stderr is read
    as it comes (`stderr_lines`), so that a server kept for many tests never blocks on a full pipe."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        command = [*SERVER_COMMAND, "--transport", "http", "--port", str(self.port), *args]
        self.process = subprocess.Popen(
            command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.stderr_lines: list[str] = []
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()
        self._wait_until_listening()

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr_lines.append(line)

    def _wait_until_listening(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._stderr_reader.join(timeout=10)
                raise RuntimeError(
                    f"server exited with {self.process.returncode}:\n{''.join(self.stderr_lines)}"
                )
            # The socket is bound before the start-up line is logged: waiting for the line as well means a
            # server stopped at once has said what it enforces.
            if any(f":{self.port}/mcp" in line for line in self.stderr_lines):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", self.port)) == 0:
                        return
            time.sleep(0.2)
        raise RuntimeError("server did not start listening in time")

    def stop(self) -> tuple[str, str]:
        """Terminate the server; returns its stdout and stderr."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr_reader.join(timeout=10)
        stdout = self.process.stdout.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return stdout, "".join(self.stderr_lines)

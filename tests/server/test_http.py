"""The server over streamable HTTP in a subprocess: tools work, foreign origins and bad tokens are refused."""

from __future__ import annotations

import socket
import subprocess

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.fixture_schema import COMMON_TABLES, fixture_rows
from tests.server.conftest import (
    INITIALIZE,
    MCP_HEADERS,
    PROJECT_ROOT,
    SERVER_COMMAND,
    ServerProcess,
    subprocess_env,
)

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOKEN = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def open_server(sqlite_dsn, cache_dir):
    server = ServerProcess("--dsn", sqlite_dsn, env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def token_server(sqlite_dsn, cache_dir):
    env = subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir), SQLSCOUT_TOKEN=TOKEN)
    server = ServerProcess("--dsn", sqlite_dsn, env=env)
    yield server
    server.stop()


def client_for(server: ServerProcess, headers: dict[str, str] | None = None) -> Client:
    return Client(streamable_http_client(server.url, http_client=create_mcp_http_client(headers=headers)))


async def test_tools_over_http(open_server):
    async with client_for(open_server) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("run_query", {"sql": "SELECT COUNT(*) AS n FROM orders"})
        refused = await client.call_tool("run_query", {"sql": "DROP TABLE orders"})
    assert {"ask_database", "run_query", "list_tables"} <= tools
    assert result.structured_content["rows"] == [[len(fixture_rows()["orders"])]]
    assert refused.is_error


def test_foreign_origin_is_refused(open_server):
    foreign = httpx.post(
        open_server.url, json=INITIALIZE, headers={**MCP_HEADERS, "Origin": "https://evil.example"}
    )
    assert foreign.status_code == 403
    local = httpx.post(
        open_server.url, json=INITIALIZE, headers={**MCP_HEADERS, "Origin": "http://localhost:3000"}
    )
    assert local.status_code == 200
    # DNS rebinding: a foreign name resolving to 127.0.0.1 arrives with its own Host header.
    rebound = httpx.post(open_server.url, json=INITIALIZE, headers={**MCP_HEADERS, "Host": "evil.example:80"})
    assert rebound.status_code == 421


async def test_token_is_required_and_checked(token_server):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        response = httpx.post(token_server.url, json=INITIALIZE, headers={**MCP_HEADERS, **headers})
        # A JSON-RPC error that clients show, not a 401 that sends them into an OAuth sign-in.
        assert response.status_code == 403, headers
        assert response.json()["error"]["message"].startswith(
            "Missing or invalid bearer token: send the header"
        )
    with_token = {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}", "Origin": "https://evil.example"}
    assert httpx.post(token_server.url, json=INITIALIZE, headers=with_token).status_code == 403
    async with client_for(token_server, {"Authorization": f"Bearer {TOKEN}"}) as client:
        result = await client.call_tool("list_tables", {})
    assert result.structured_content["total"] == len(COMMON_TABLES)


def test_oauth_paths_are_not_found_with_or_without_a_token(token_server, open_server):
    """A 401 there would make clients start an OAuth flow ("Interactive OAuth requires a TTY") instead of showing
    the endpoint's own "missing or invalid bearer token"."""
    for server in (token_server, open_server):
        base = server.url.removesuffix("/mcp")
        for path in (
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-authorization-server",
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/openid-configuration",
        ):
            assert httpx.get(base + path).status_code == 404, path
        # Where clients without discovery look for OAuth's endpoints (MCP 2025-03-26's default paths).
        for path in ("/register", "/authorize", "/token"):
            assert httpx.post(base + path, json={}).status_code == 404, path


def test_logs_go_to_stderr_only_and_say_what_is_enforced(sqlite_dsn, cache_dir, tmp_path):
    server = ServerProcess("--dsn", sqlite_dsn, env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)))
    httpx.post(server.url, json=INITIALIZE, headers=MCP_HEADERS)
    stdout, stderr = server.stop()
    assert stdout == ""
    assert (
        "listening on http://127.0.0.1" in stderr
        and "(no token: any program on this machine may call it)" in stderr
    )
    assert "bearer token required" not in stderr
    config = tmp_path / "team.toml"
    config.write_text(f'[sources.shop]\ndsn = "{sqlite_dsn}"\n')
    from_file = ServerProcess("--config", str(config), env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)))
    assert httpx.post(from_file.url, json=INITIALIZE, headers=MCP_HEADERS).status_code == 200
    _, stderr = from_file.stop()
    assert "(no token: any program on this machine may call it)" in stderr
    with_token = ServerProcess(
        "--dsn", sqlite_dsn, env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir), SQLSCOUT_TOKEN=TOKEN)
    )
    _, stderr = with_token.stop()
    assert "(bearer token required)" in stderr


def test_a_port_in_use_is_one_line_naming_the_flag(sqlite_dsn, cache_dir):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*SERVER_COMMAND, "--transport", "http", "--port", str(port), "--dsn", sqlite_dsn],
            env=subprocess_env(SQLSCOUT_CACHE_DIR=str(cache_dir)),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"sqlscout: port {port} on 127.0.0.1 is already in use by another program: pick a free port with "
        "--port PORT (SQLSCOUT_PORT)"
    ]

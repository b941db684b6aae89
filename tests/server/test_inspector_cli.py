"""A client nobody here wrote: the MCP Inspector's CLI (from npm) lists the tools and calls every one, and reads the
schema overview, over stdio and streamable HTTP, in both protocol eras it speaks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.completions_server import CompletionsServer, completion
from tests.server.conftest import ServerProcess, subprocess_env
from tests.server.test_light_install import SUBMIT
from tests.server.test_tool_list import TOOLS

# Slow (left out of the fast tier): installs the MCP Inspector from npm and starts a server per call.
pytestmark = pytest.mark.slow


INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
TOKEN = "inspector-token"
CALLS = {
    "list_sources": {},
    "ask_database": {"question": "How many orders per status?"},
    "list_tables": {},
    "describe_table": {"table": "orders"},
    "search_schema": {"keywords": "customer city"},
    "search_values": {"text": "new york"},
    "sample_rows": {"table": "customers"},
    "run_query": {"sql": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status"},
    "explain_query": {"sql": "SELECT * FROM orders WHERE id = 3"},
}
ASK_SCRIPT = [
    completion('Tables first.</think>\n{"tool": "list_tables", "args": {}}', 400, 12),
    completion(f"Count by status.</think>\n{SUBMIT}", 460, 20),
]


@pytest.fixture(scope="module")
def inspector(tmp_path_factory) -> str:
    """The Inspector's command, installed from npm into a temporary folder."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the Inspector CLI comes from npm")
    prefix = tmp_path_factory.mktemp("inspector")
    done = subprocess.run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix), INSPECTOR],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        pytest.skip(f"npm could not install {INSPECTOR} (no package registry here?): {done.stderr[-300:]}")
    return str(prefix / "node_modules" / ".bin" / "mcp-inspector")


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_inspector_lists_and_calls_every_tool(inspector, transport, era, sqlite_dsn, cache_dir):
    with CompletionsServer(ASK_SCRIPT) as endpoint:
        flags = ["--dsn", sqlite_dsn, "--endpoint", f"{endpoint.url}/v1", "--endpoint-model", "m"]
        env = {"SQLSCOUT_CACHE_DIR": str(cache_dir)}
        if transport == "stdio":
            server = None
            target = ["-e", f"SQLSCOUT_CACHE_DIR={cache_dir}", sys.executable, "-m", "mcp_server", *flags]
        else:
            server = ServerProcess(*flags, env=subprocess_env(**env, SQLSCOUT_TOKEN=TOKEN))
            target = ["--server-url", server.url, "--header", f"Authorization: Bearer {TOKEN}"]
        try:

            def inspect(*method: str) -> tuple[dict, str]:
                command = [inspector, "--cli", "--protocol-era", era, "--format", "json", *method, *target]
                done = subprocess.run(command, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, f"{method}\n{done.stdout}\n{done.stderr}"
                return json.loads(done.stdout)["result"], done.stderr

            listed, report = inspect("--method", "tools/list", "--strict")
            assert {tool["name"] for tool in listed["tools"]} == TOOLS
            assert not re.search(r"^(Warning|Error): tool", report, re.MULTILINE), (
                report
            )  # --strict's findings
            results = {
                name: inspect(
                    "--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(args)
                )[0]
                for name, args in CALLS.items()
            }
            overview, _ = inspect("--method", "resources/read", "--uri", "schema://overview")
        finally:
            if server is not None:
                server.stop()
    for name, result in results.items():
        assert result["isError"] is False, (name, result["content"])
        assert result["structuredContent"], name
    assert sorted(map(tuple, results["ask_database"]["structuredContent"]["rows"])) == sorted(
        map(tuple, results["run_query"]["structuredContent"]["rows"])
    )
    # Over stdio each call is a fresh server, which may still be contacting the model server when asked.
    model = results["list_sources"]["structuredContent"]["model"]
    assert model.startswith("ready: the model server at") or (
        transport == "stdio" and model.startswith("checking the model server at")
    ), model
    assert "# Tables of" in overview["contents"][0]["text"]


@pytest.mark.parametrize("header", [None, "Authorization: Bearer wrong"])
def test_the_inspector_without_the_token_shows_the_servers_refusal_not_oauth(inspector, header, sqlite_dsn):
    server = ServerProcess("--dsn", sqlite_dsn, env=subprocess_env(SQLSCOUT_TOKEN=TOKEN))
    try:
        target = ["--server-url", server.url, *(["--header", header] if header else [])]
        answers = {
            era: subprocess.run(
                [
                    inspector,
                    "--cli",
                    "--protocol-era",
                    era,
                    "--format",
                    "json",
                    "--method",
                    "tools/list",
                    *target,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            for era in ("legacy", "modern")
        }
    finally:
        server.stop()
    for era, done in answers.items():
        assert done.returncode != 0 and "OAuth" not in done.stdout + done.stderr, (era, done.stderr)
    assert (
        "Missing or invalid bearer token: send the header"
        in answers["legacy"].stdout + answers["legacy"].stderr
    )
    assert "denied access (HTTP 403)" in answers["modern"].stdout + answers["modern"].stderr

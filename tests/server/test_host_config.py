"""Host configuration snippets: absolute paths, secrets in the environment, the hosts' own formats."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from mcp_server import host_config
from mcp_server.host_config import absolute_dsn, host_instructions, host_snippet
from mcp_server.settings import Settings

USER_PYTHON_ON_WINDOWS = r"C:\Users\Ada Lovelace\AppData\Local\Programs\Python\Python311\python.exe"


def test_claude_desktop_runs_this_python_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = Settings(dsn="shop.sqlite", max_rows=50, transport="http")
    entry = json.loads(host_snippet("claude-desktop", settings, "shop"))["mcpServers"]["shop"]
    assert entry["command"] == sys.executable
    assert entry["args"] == ["-m", "mcp_server", "--dsn", str(tmp_path / "shop.sqlite"), "--max-rows", "50"]


def test_secrets_go_to_the_environment_not_the_arguments(tmp_path):
    settings = Settings(
        dsn="postgresql://reader:s3cret@db.internal/sales",
        endpoint="http://gpu:8001/v1",
        endpoint_model="sqale",
        api_key="k-123",
    )
    entry = json.loads(host_snippet("vscode", settings))["servers"]["sqlscout"]
    assert entry["type"] == "stdio"
    assert "s3cret" not in " ".join(entry["args"]) and "k-123" not in " ".join(entry["args"])
    assert entry["env"]["SQLSCOUT_DSN"] == settings.dsn
    assert entry["env"]["SQLSCOUT_API_KEY"] == "k-123"
    assert entry["args"][entry["args"].index("--endpoint-model") + 1] == "sqale"


def test_vscode_and_claude_code_point_at_a_running_http_server():
    settings = Settings(transport="http", port=8123, token="tok")
    entry = json.loads(host_snippet("vscode", settings))["servers"]["sqlscout"]
    assert entry == {
        "type": "http",
        "url": "http://127.0.0.1:8123/mcp",
        "headers": {"Authorization": "Bearer tok"},
    }
    words = shlex.split(host_snippet("claude-code", settings))
    assert words[:6] == ["claude", "mcp", "add", "--transport", "http", "sqlscout"]
    assert words[6] == "http://127.0.0.1:8123/mcp"
    assert words[words.index("--header") + 1] == "Authorization: Bearer tok"


def test_claude_code_stdio_command(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    settings = Settings(model=str(tmp_path), samples=3)
    words = shlex.split(host_snippet("claude-code", settings, "db"))
    assert words[:4] == ["claude", "mcp", "add", "db"]
    command = words[words.index("--") + 1 :]
    assert command == [sys.executable, "-m", "mcp_server", "--model", str(tmp_path), "--samples", "3"]


def test_absolute_dsn_leaves_server_dsns_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_dsn("sqlite:///data/x.db") == "sqlite:///" + str(Path(tmp_path, "data/x.db"))
    assert absolute_dsn("duckdb:///data/x.duckdb") == "duckdb:///" + str(Path(tmp_path, "data/x.duckdb"))
    assert absolute_dsn("exports") == str(Path(tmp_path, "exports"))
    assert absolute_dsn("postgresql://u@h/db") == "postgresql://u@h/db"
    assert absolute_dsn("mysql://u:p@h/db") == "mysql://u:p@h/db"
    assert absolute_dsn("host=h dbname=d") == "host=h dbname=d"


@pytest.fixture
def on_windows(monkeypatch):
    """This process as seen on a Windows machine with sqlscout installed in a per-user Python."""
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(sys, "executable", USER_PYTHON_ON_WINDOWS)
    monkeypatch.setattr(host_config, "_installed", lambda: True)


def test_claude_code_on_windows_is_quoted_for_powershell_or_cmd(on_windows):
    settings = Settings(dsn="postgresql://reader:it's$100%@db/sales", max_rows=50)
    assert host_snippet("claude-code", settings, "shop") == (
        "claude mcp add shop --env 'SQLSCOUT_DSN=postgresql://reader:it''s$100%@db/sales' "
        f"'--' '{USER_PYTHON_ON_WINDOWS}' -m mcp_server --max-rows '50'"
    )
    assert host_snippet("claude-code", settings, "shop", shell="cmd") == (
        'claude mcp add shop --env "SQLSCOUT_DSN=postgresql://reader:it\'s$100"^%"@db/sales" '
        f'-- "{USER_PYTHON_ON_WINDOWS}" -m mcp_server --max-rows 50'
    )


def test_json_snippets_escape_a_windows_interpreter_path(on_windows):
    text = host_snippet("vscode", Settings())
    assert '"command": "C:\\\\Users\\\\Ada Lovelace\\\\AppData' in text
    assert json.loads(text)["servers"]["sqlscout"]["command"] == USER_PYTHON_ON_WINDOWS


def test_instructions_say_where_the_snippet_goes_and_on_which_machine():
    desktop = host_instructions("claude-desktop", Settings())
    assert "~/Library/Application Support/Claude/claude_desktop_config.json" in desktop
    assert r"%APPDATA%\Claude\claude_desktop_config.json" in desktop
    assert "~/.config/Claude/claude_desktop_config.json" in desktop
    assert f"({sys.executable})" in desktop and "on the machine Claude Desktop runs on" in desktop
    vscode = host_instructions("vscode", Settings())
    assert ".vscode/mcp.json" in vscode and '"MCP: Open User Configuration"' in vscode
    code = host_instructions("claude-code", Settings(), "powershell")
    assert "Run this in PowerShell" in code and "--scope user" in code and "--scope project" in code
    over_http = host_instructions("claude-code", Settings(transport="http", port=8123))
    assert "connects to http://127.0.0.1:8123/mcp" in over_http

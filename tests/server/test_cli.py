"""The command line: `ask` in the terminal, `config` snippets, and setting errors, each as a subprocess."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.server.conftest import PROJECT_ROOT, SERVER_COMMAND, subprocess_env

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = pytest.mark.slow


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVER_COMMAND, *args],
        env=subprocess_env(**env),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_config_uses_flags_and_environment(sqlite_dsn):
    done = run_cli("config", "claude-desktop", "--name", "shop", "--dsn", sqlite_dsn, SQLSCOUT_MAX_ROWS="7")
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["shop"]
    assert entry["args"][-4:] == ["--dsn", sqlite_dsn, "--max-rows", "7"]
    vscode = json.loads(run_cli("config", "vscode", "--transport", "http", "--port", "9100").stdout)
    assert vscode["servers"]["sqlscout"] == {"type": "http", "url": "http://127.0.0.1:9100/mcp"}


@pytest.mark.parametrize("missing", ["missing.sqlite", "missing.csv"])
def test_serving_a_database_file_that_is_not_there_is_a_usage_error(missing):
    """As in `config`: the flag's value is wrong, in one line."""
    done = run_cli("--dsn", missing)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "python -m mcp_server: error: no " in done.stderr and "check the path in --dsn" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 2  # the line, and where --help is


def test_config_refuses_a_database_file_that_is_not_there(tmp_path):
    done = run_cli("config", "vscode", "--dsn", "missing.sqlite")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert (
        f"error: no SQLite database at {PROJECT_ROOT / 'missing.sqlite'}: check the path in --dsn"
        in done.stderr
    )
    folder = run_cli("config", "claude-code", "--dsn", str(tmp_path))
    assert folder.returncode == 2 and f"{tmp_path} is a folder, not a SQLite database" in folder.stderr
    duckdb_file = run_cli("config", "vscode", "--dsn", str(tmp_path / "missing.duckdb"))
    assert duckdb_file.returncode == 2 and "no DuckDB database at" in duckdb_file.stderr
    # A server DSN is written as given: the host may reach servers that this machine cannot.
    server = run_cli("config", "vscode", "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert server.returncode == 0, server.stderr
    assert (
        json.loads(server.stdout)["servers"]["sqlscout"]["args"][-1] == "postgresql://nobody@127.0.0.1:1/none"
    )


def test_config_keeps_stdout_for_the_snippet_and_says_where_it_goes_on_stderr():
    desktop = run_cli("config", "claude-desktop")
    assert desktop.returncode == 0, desktop.stderr
    assert "mcpServers" in json.loads(desktop.stdout)  # nothing but the JSON: it can be piped
    assert r"%APPDATA%\Claude\claude_desktop_config.json" in desktop.stderr
    code = run_cli(
        "config", "claude-code", "--shell", "cmd", SQLSCOUT_CONFIG_NAME="shop", SQLSCOUT_CONFIG_SHELL="posix"
    )
    assert code.returncode == 0, code.stderr
    assert code.stdout.startswith("claude mcp add shop -- ") and code.stdout.count("\n") == 1
    assert "Run this in cmd.exe" in code.stderr  # the flag wins over the variable


def test_an_unknown_shell_in_the_environment_is_a_usage_error():
    done = run_cli("config", "claude-code", SQLSCOUT_CONFIG_SHELL="fish")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: argument --shell: invalid choice: 'fish'" in done.stderr


def test_setting_errors_are_reported_without_a_traceback():
    done = run_cli("--transport", "http", "--host", "0.0.0.0")
    assert done.returncode == 2
    assert "set --token TOKEN" in done.stderr and "Traceback" not in done.stderr
    bad_env = run_cli("config", "vscode", SQLSCOUT_PORT="http")
    assert bad_env.returncode == 2 and "Traceback" not in bad_env.stderr
    # The one line that matters, not the whole usage block before it; named as the command was started.
    assert bad_env.stderr.splitlines() == [
        "python -m mcp_server config: error: argument --port: invalid int value: 'http'",
        "(`python -m mcp_server config --help` lists the options)",
    ]


def test_a_folder_that_is_not_a_model_is_refused_before_serving(tmp_path):
    done = run_cli("--model", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "serving" not in done.stderr
    assert f"--model {tmp_path} has no config.json, so it is not a model directory" in done.stderr
    assert "hf download trl-lab/qwen3.5-2b-grpo-sqale --local-dir DIR" in done.stderr


def test_an_empty_question_is_a_usage_error():
    done = run_cli("ask", "  ")
    assert done.returncode == 2 and "the question is empty" in done.stderr


def test_ask_without_a_model_says_how_to_configure_one(sqlite_dsn):
    done = run_cli("ask", "How many orders?", "--dsn", sqlite_dsn)
    assert done.returncode == 2
    assert "--model DIR" in done.stderr and "SQLSCOUT_MODEL" in done.stderr and done.stdout == ""
    # With --json, a script reading stdout gets the failure as JSON.
    as_json = run_cli("ask", "How many orders?", "--dsn", sqlite_dsn, "--json")
    assert as_json.returncode == 2
    failure = json.loads(as_json.stdout)
    assert failure["kind"] == "PolicyConfigError" and "--model DIR" in failure["error"]


def test_unreachable_database_is_reported(tmp_path):
    done = run_cli("ask", "How many orders?", "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert done.returncode == 1
    assert done.stderr.startswith("sqlscout: ") and "Traceback" not in done.stderr


class _RefusingEndpoint(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_a_failing_endpoint_is_reported_without_a_traceback(sqlite_dsn):
    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingEndpoint)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{endpoint.server_address[1]}/v1"
        done = run_cli(
            "ask", "How many orders?", "--dsn", sqlite_dsn, "--endpoint", url, "--endpoint-model", "m"
        )
    finally:
        endpoint.shutdown()
    assert done.returncode == 1
    assert "asks for an API key (HTTP 401): give it with --api-key" in done.stderr
    assert "Traceback" not in done.stderr


def test_ask_on_a_tiny_local_model(sqlite_dsn, tiny_model_dir, cache_dir):
    args = (
        "ask",
        "How many orders are there?",
        "--dsn",
        sqlite_dsn,
        "--model",
        str(tiny_model_dir),
        "--device",
        "cpu",
        "--token-budget",
        "448",
    )
    as_table = run_cli(*args, SQLSCOUT_CACHE_DIR=str(cache_dir))
    assert as_table.returncode == 0, as_table.stderr
    assert as_table.stdout.startswith("-- ")
    assert "round" in as_table.stderr  # the progress bar
    as_json = run_cli(*args, "--json", SQLSCOUT_CACHE_DIR=str(cache_dir))
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["sql_dialect"] == "sqlite" and answer["trace"]["rounds"]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--dns", "shop.sqlite"], "; did you mean --dsn?"),
        (["--max-row", "5"], "; did you mean --max-rows?"),  # no silent abbreviation of --max-rows
        (["configure", "claude-desktop"], "; did you mean `python -m mcp_server config`?"),
        (["How many customers?"], '; to ask a question: python -m mcp_server ask "How many customers?"'),
        (["ask", "q", "--jsn"], "; did you mean --json?"),
    ],
)
def test_a_mistyped_flag_or_command_gets_the_closest(argv, hint, capsys, monkeypatch):
    from mcp_server.cli import main
    from tests.usage_errors import usage_error

    monkeypatch.setattr("sys.argv", ["/x/mcp_server/__main__.py"])
    err = usage_error(lambda: main(argv), capsys)
    assert err.splitlines()[0].endswith(hint), err

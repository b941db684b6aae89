"""`python -m dbtools` run as a subprocess, as people and scripts use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbtools.cli import build_parser, main
from tests.dbtools.test_tool_formats import PUBLISHED_DESCRIBE, PUBLISHED_SELECT
from tests.usage_errors import usage_error

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SQLSCOUT_")}
    full_env["SQLSCOUT_CACHE_DIR"] = os.environ["SQLSCOUT_CACHE_DIR"]  # the test run's, not ~/.cache/sqlscout
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "dbtools", *args],
        cwd=REPO,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_query_prints_the_protocol_text(sqlite_dsn):
    done = run_cli("--dsn", sqlite_dsn, "run_query", "SELECT * FROM AlertLogs LIMIT 10")
    assert done.returncode == 0, done.stderr
    assert done.stdout == PUBLISHED_SELECT + "\n"


def test_describe_table_prints_the_protocol_text(sqlite_dsn):
    done = run_cli("describe_table", "AlertLogs", env={"SQLSCOUT_DSN": sqlite_dsn})
    assert done.returncode == 0 and done.stdout == PUBLISHED_DESCRIBE + "\n"


def test_every_agent_tool_runs(sqlite_dsn):
    for args in (
        ["list_tables"],
        ["foreign_keys", "orders"],
        ["join_path", "countries", "products"],
        ["sample_rows", "countries", "2"],
        ["distinct_values", "orders", "status", "2"],
        ["submit_sql", "SELECT 1 AS one"],
    ):
        done = run_cli("--dsn", sqlite_dsn, *args)
        assert done.returncode == 0 and done.stdout.strip(), (args, done.stderr)
    assert (
        run_cli("--dsn", sqlite_dsn, "sample_rows", "countries", "2").stdout
        == "code | name\nDE | Germany\nFR | France\n"
    )


def test_json_output_and_options_after_the_tool(sqlite_dsn):
    done = run_cli(
        "run_query", "SELECT id FROM users ORDER BY id", "--max-rows", "3", "--json", "--dsn", sqlite_dsn
    )
    data = json.loads(done.stdout)
    assert data["tables"] == ["users"] and data["error"] is None
    assert data["result"]["rows"] == [[1], [2], [3]] and data["result"]["truncated"] is True


def test_query_prints_every_row_with_a_summary(sqlite_dsn):
    done = run_cli("query", "SELECT code FROM countries ORDER BY code", env={"SQLSCOUT_DSN": sqlite_dsn})
    lines = done.stdout.splitlines()
    assert lines[:5] == ["code", "DE", "FR", "JP", "US"] and lines[5].startswith("(4 rows, ")
    capped = run_cli(
        "query",
        "-",
        "--json",
        env={"SQLSCOUT_DSN": sqlite_dsn, "SQLSCOUT_MAX_ROWS": "2"},
        stdin="SELECT id FROM users",
    )
    data = json.loads(capped.stdout)
    assert data["row_count"] == 2 and data["truncated"] and "row cap" in data["truncation"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run_query", "DELETE FROM users"], "error: only read-only queries"),
        (["run_query", "SELECT 1; DROP TABLE users"], "error: only one statement per call"),
        (["describe_table", "custmers"], 'error: no table named "custmers"; closest: customers'),
        (["query", "SELECT nope FROM users"], "error: no such column: nope"),
    ],
)
def test_errors_exit_non_zero_with_a_message_and_no_traceback(sqlite_dsn, args, message):
    done = run_cli("--dsn", sqlite_dsn, *args)
    assert done.returncode == 1
    assert done.stderr.startswith(message) and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_timeout_flag_and_variable(sqlite_dsn):
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    done = run_cli("--dsn", sqlite_dsn, "--timeout", "0.3", "run_query", slow)
    assert done.returncode == 1 and "query cancelled after" in done.stderr and "timeout 0.3 s" in done.stderr
    done = run_cli("query", slow, env={"SQLSCOUT_DSN": sqlite_dsn, "SQLSCOUT_TIMEOUT": "0.2"})
    assert done.returncode == 1 and "timeout 0.2 s" in done.stderr


def test_bad_option_values_are_usage_errors(sqlite_dsn):
    assert run_cli("--dsn", sqlite_dsn, "--max-rows", "0", "list_tables").returncode == 2
    done = run_cli("list_tables", env={"SQLSCOUT_DSN": sqlite_dsn, "SQLSCOUT_TIMEOUT": "soon"})
    assert done.returncode == 2 and "not a number: 'soon'" in done.stderr
    for endless in ("nan", "inf"):  # a timeout that never expires
        done = run_cli("--dsn", sqlite_dsn, "--timeout", endless, "list_tables")
        assert done.returncode == 2 and f"must be a positive number: '{endless}'" in done.stderr


def test_connection_errors_are_one_clear_line(tmp_path):
    done = run_cli("--dsn", str(tmp_path / "missing.sqlite"), "list_tables")
    assert done.returncode == 1 and done.stderr.startswith("error: no SQLite database at")
    assert "Traceback" not in done.stderr
    done = run_cli("--dsn", "postgresql://nobody:secret@127.0.0.1:1/db", "list_tables")
    assert done.returncode == 1 and "cannot connect to postgresql://nobody:***@127.0.0.1:1/db" in done.stderr
    assert "secret" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.postgres
def test_cli_on_postgres(postgres_dsn):
    done = run_cli("--dsn", postgres_dsn, "join_path", "sales.invoices", "countries")
    assert done.stdout == "sales.invoices → orders → customers → countries\n"
    done = run_cli(
        "--dsn", postgres_dsn, "run_query", 'SELECT "userId" FROM "AlertLogs" WHERE id = 2', "--json"
    )
    assert json.loads(done.stdout)["result"]["rows"] == [[5]]


def test_json_errors_go_to_stdout_as_json_and_to_stderr_as_text(sqlite_dsn):
    done = run_cli("--dsn", sqlite_dsn, "--json", "describe_table", "custmers")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"].startswith('no table named "custmers"')
    assert done.stderr.startswith('error: no table named "custmers"')


def test_search_values_and_search_schema(sqlite_dsn, tmp_path):
    env = {"SQLSCOUT_DSN": sqlite_dsn}
    done = run_cli("search_values", "germany", "--cache-dir", str(tmp_path), "--json", env=env)
    assert done.returncode == 0, done.stderr
    best = json.loads(done.stdout)[0]
    assert (best["table"], best["column"], best["values"]) == ("countries", "name", ["Germany"])
    assert list(tmp_path.iterdir())  # the value index went to the cache directory given
    done = run_cli("search_schema", "country", "code", env={**env, "SQLSCOUT_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0 and "customers.country_code" in done.stdout


def test_output_cut_short_by_its_reader_ends_quietly(sqlite_dsn):
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) SELECT i FROM n"
    cli = subprocess.Popen(
        [sys.executable, "-m", "dbtools", "--dsn", sqlite_dsn, "--max-rows", "200000", "query", sql],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    cli.stdout.read(100)  # like `| head`: read a little, then close the pipe
    cli.stdout.close()
    stderr = cli.stderr.read().decode()
    assert cli.wait(timeout=60) == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_variables_set_the_options_and_flags_before_or_after_the_tool_win():
    env = {"SQLSCOUT_DSN": "shop.sqlite", "SQLSCOUT_TIMEOUT": "3", "SQLSCOUT_MAX_ROWS": "7"}
    parser = build_parser()
    args = parser.parse_args(["list_tables"], env_vars=env)
    assert (args.dsn, args.timeout, args.max_rows, args.max_chars) == ("shop.sqlite", 3.0, 7, 100_000)
    args = parser.parse_args(["--timeout", "5", "list_tables", "--max-rows", "2"], env_vars=env)
    assert (args.dsn, args.timeout, args.max_rows) == ("shop.sqlite", 5.0, 2)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SQLSCOUT_MAX_ROWS", "0", "argument --max-rows: must be a positive number: '0'"),
        ("SQLSCOUT_MAX_CHARS", "lots", "argument --max-chars: not a number: 'lots'"),
        ("SQLSCOUT_LOG_LEVEL", "chatty", "argument --log-level: invalid choice: 'chatty'"),
    ],
)
def test_a_bad_variable_is_a_usage_error_naming_the_option(variable, value, message, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: main(["list_tables"]), capsys)

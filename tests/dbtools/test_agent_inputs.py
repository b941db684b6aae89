"""Bad input from the model never raises: every malformed call comes back as a clear error output."""

from __future__ import annotations

import pytest

from dbtools.agent_tools import SAMPLE_ROWS_MAX, AgentToolbox, ToolOutput


@pytest.fixture
def tools(db) -> AgentToolbox:
    return AgentToolbox(db)


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("drop_table", {}, 'unknown tool "drop_table"; the tools are: list_tables, describe_table'),
        (None, {}, 'unknown tool "None"'),
        (42, {"sql": "SELECT 1"}, 'unknown tool "42"'),
        ("describe_table", {}, 'describe_table: missing argument "table_name" (expected: table_name)'),
        ("describe_table", {"table": "users"}, 'describe_table: missing argument "table_name"'),
        (
            "describe_table",
            {"table_name": "users", "verbose": True},
            'describe_table: unexpected argument "verbose"',
        ),
        ("describe_table", ["users"], "describe_table: arguments must be a JSON object"),
        ("describe_table", "users", "describe_table: arguments must be a JSON object"),
        (
            "describe_table",
            {"table_name": 5},
            'describe_table: argument "table_name" must be a non-empty string',
        ),
        (
            "describe_table",
            {"table_name": ""},
            'describe_table: argument "table_name" must be a non-empty string',
        ),
        (
            "describe_table",
            {"table_name": None},
            'describe_table: argument "table_name" must be a non-empty string',
        ),
        ("join_path", {"table_a": "users"}, 'join_path: missing argument "table_b"'),
        ("run_query", {"sql": ["SELECT 1"]}, 'run_query: argument "sql" must be a non-empty string'),
        ("run_query", {"query": "SELECT 1"}, 'run_query: missing argument "sql"'),
        (
            "sample_rows",
            {"table_name": "users", "limit": "many"},
            "sample_rows: limit must be a whole number from 1 to 50",
        ),
        ("sample_rows", {"table_name": "users", "limit": 0}, "sample_rows: limit must be a whole number"),
        ("sample_rows", {"table_name": "users", "limit": -3}, "sample_rows: limit must be a whole number"),
        ("sample_rows", {"table_name": "users", "limit": True}, "sample_rows: limit must be a whole number"),
        ("sample_rows", {"table_name": "users", "limit": 2.5}, "sample_rows: limit must be a whole number"),
        ("sample_rows", {"table_name": "users", "limit": [3]}, "sample_rows: limit must be a whole number"),
        (
            "distinct_values",
            {"table_name": "users", "column_name": "nmae"},
            'no column "nmae" in table "users"; closest: name',
        ),
        ("describe_table", {"table_name": "custmer"}, 'no table named "custmer"; closest: customers'),
        ("foreign_keys", {"table_name": "AlertLog"}, 'no table named "AlertLog"; closest: AlertLogs'),
        (
            "join_path",
            {"table_a": "users", "table_b": "prodcts"},
            'no table named "prodcts"; closest: products',
        ),
    ],
)
def test_bad_calls_return_an_error_output(tools, tool, args, message):
    output = tools.call(tool, args)
    assert isinstance(output, ToolOutput)
    assert output.error is not None and output.text == output.error
    assert output.text.startswith(message), output.text


@pytest.mark.parametrize("limit", [3, "3", " 3 ", 3.0])
def test_limit_accepts_whole_numbers_and_their_text(tools, limit):
    output = tools.call("sample_rows", {"table_name": "users", "limit": limit})
    assert output.error is None and len(output.text.splitlines()) == 1 + 3


def test_limit_is_capped_and_null_means_the_default(tools):
    assert (
        len(tools.call("sample_rows", {"table_name": "AlertLogs", "limit": 10_000}).result.rows)
        == SAMPLE_ROWS_MAX
    )
    assert len(tools.call("sample_rows", {"table_name": "users", "limit": None}).text.splitlines()) == 1 + 5


def test_list_tables_accepts_no_arguments_or_null(tools):
    assert tools.call("list_tables", None).error is None
    assert tools.call("list_tables", {}).error is None
    assert tools.call("list_tables", {"x": 1}).error is not None


def test_unexpected_failures_inside_a_tool_become_error_outputs(tools, monkeypatch):
    def broken():
        raise RuntimeError("catalog exploded")

    monkeypatch.setattr(tools.db, "tables", broken)
    output = tools.call("list_tables", {})
    assert output.error == "list_tables failed: catalog exploded"


def test_errors_report_the_existing_tables_the_call_named(tools):
    assert tools.call("run_query", {"sql": "SELECT nope FROM users JOIN ghosts ON 1 = 1"}).tables == (
        "users",
    )
    assert tools.call("distinct_values", {"table_name": "orders", "column_name": "x"}).tables == ("orders",)
    assert tools.call("describe_table", {"table_name": "ghosts"}).tables == ()

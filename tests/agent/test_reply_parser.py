"""The tolerant reading of model replies: calls after the reasoning, in any wrapping, and plain SQL answers."""

from __future__ import annotations

import pytest

from mcp_server.agent.reply_parser import ToolCall, extract_sql, parse_reply


def test_several_calls_in_fences_and_prose_in_order():
    reply = parse_reply(
        "Plan: tables first.</think>\nLet me look.\n```json\n"
        '{"tool": "list_tables", "args": {}}\n```\nand then\n'
        '[{"tool": "describe_table", "args": {"table_name": "orders"}}, '
        '{"tool": "run_query", "args": {"sql": "SELECT \'}{\' AS brace, \\"x\\" FROM t"}}]'
    )
    assert reply.reasoning == "Plan: tables first."
    assert reply.calls == [
        ToolCall("list_tables", {}),
        ToolCall("describe_table", {"table_name": "orders"}),
        ToolCall("run_query", {"sql": "SELECT '}{' AS brace, \"x\" FROM t"}),
    ]
    assert reply.malformed_calls == 0


def test_trailing_commas_single_quotes_and_python_literals():
    reply = parse_reply(
        "</think>{'tool': 'sample_rows', 'args': {'table_name': 'users', 'limit': 3,},}\n"
        '{"tool": "distinct_values", "args": {"table_name": "users", "column_name": "active", "limit": 5,},}'
    )
    assert reply.calls == [
        ToolCall("sample_rows", {"table_name": "users", "limit": 3}),
        ToolCall("distinct_values", {"table_name": "users", "column_name": "active", "limit": 5}),
    ]


def test_repairs_leave_string_contents_alone():
    reply = parse_reply(
        "</think>{'tool': 'run_query', 'args': {'sql': 'SELECT a, b FROM t WHERE x IS null AND y = true', "
        "'strict': true,},}"
    )
    assert reply.calls == [
        ToolCall("run_query", {"sql": "SELECT a, b FROM t WHERE x IS null AND y = true", "strict": True})
    ]
    assert parse_reply('</think>{"tool": "run_query", "args": {"sql": "SELECT \'a,}\'",},}').calls == [
        ToolCall("run_query", {"sql": "SELECT 'a,}'"})
    ]


def test_calls_while_thinking_do_not_count():
    reply = parse_reply('I could call {"tool": "list_tables", "args": {}} now.</think>\nNo, I will answer.')
    assert reply.calls == [] and reply.action == "No, I will answer."
    unclosed = parse_reply('still thinking {"tool": "list_tables", "args": {}}')
    assert unclosed.calls == [] and unclosed.action == ""


def test_reply_without_a_think_block_when_the_header_did_not_open_one():
    reply = parse_reply('{"tool": "list_tables", "args": {}}', thinking_open=False)
    assert reply.calls == [ToolCall("list_tables", {})]


def test_broken_calls_are_counted_not_run_and_nested_valid_calls_are_found():
    reply = parse_reply(
        '</think>{"tool": "run_query", "args": {"sql": SELECT 1}}\n'
        '{"note": {"tool": "list_tables", "args": {}}}\n'
        '{"tool": "run_query", "args": {"sql": "SELECT 2"'
    )
    assert reply.calls == [ToolCall("list_tables", {})]
    assert reply.malformed_calls == 2


def test_objects_that_are_not_calls_are_ignored():
    reply = parse_reply('</think>The result {"a": 1} looks fine; {"tool": 5} is odd.')
    assert reply.calls == [] and reply.malformed_calls == 1


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        ("```sql\nSELECT a FROM t;\n```", "SELECT a FROM t"),
        ("First\n```sql\nSELECT 1\n```\nbetter:\n```sqlite\nSELECT 2 FROM t\n```", "SELECT 2 FROM t"),
        ("```\nWITH c AS (SELECT 1 AS x) SELECT x FROM c\n```", "WITH c AS (SELECT 1 AS x) SELECT x FROM c"),
        (
            "The answer is SELECT COUNT(*) FROM t WHERE x = 'a;b'; done",
            "SELECT COUNT(*) FROM t WHERE x = 'a;b'",
        ),
        (
            "Query:\nSELECT name\nFROM users\nWHERE id = 3\nThis returns the name.",
            "SELECT name\nFROM users\nWHERE id = 3",
        ),
        (
            "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select n from r",
            "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select n from r",
        ),
    ],
)
def test_extract_sql_from_plain_answers(text, sql):
    assert extract_sql(text) == sql


@pytest.mark.parametrize(
    "text",
    ["", "With this data we should SELECT carefully.", "```python\nprint('SELECT 1')\n```", "DELETE FROM t"],
)
def test_no_sql_in_prose(text):
    assert extract_sql(text) is None


def test_sql_written_over_several_raw_lines_is_a_call():
    reply = parse_reply(
        '</think>\n{"tool": "run_query", "args": {"sql": "SELECT name\n  FROM employees\tWHERE id = 1"}}'
    )
    assert reply.calls == [ToolCall("run_query", {"sql": "SELECT name\n  FROM employees\tWHERE id = 1"})]
    assert reply.malformed_calls == 0


def test_a_call_missing_its_closing_brace_does_not_hide_the_calls_after_it():
    reply = parse_reply(
        '</think>\n{"tool": "list_tables", "args": {}\n'
        '{"tool": "describe_table", "args": {"table_name": "orders"}}\n'
        '{"tool": "run_query", "args": {"sql": "SELECT 1"'
    )
    assert reply.calls == [ToolCall("describe_table", {"table_name": "orders"})]
    assert reply.malformed_calls == 2


def test_python_only_values_make_a_call_malformed():
    reply = parse_reply(
        '</think>{"tool": "describe_table", "args": {"table_name": {"users"}}}\n'
        "{'tool': 'sample_rows', 'args': {'table_name': 'users', 'limit': 2j}}\n"
        "{'tool': 'list_tables', 'args': {}}"
    )
    assert reply.calls == [ToolCall("list_tables", {})]
    assert reply.malformed_calls == 2


@pytest.mark.parametrize(
    "action",
    [
        '{"tool": "list_tables", "args": {{}}}',  # a set holding a dict, for Python
        "{" * 1200 + "}" * 1200,
        '{"a": ' * 1200 + "1" + "}" * 1200,
    ],
    ids=["set-of-dict", "nested-braces", "nested-objects"],
)
def test_degenerate_objects_are_not_calls(action):
    reply = parse_reply("</think>\n" + action)
    assert reply.calls == []


def test_degenerate_nesting_is_not_sql():
    assert extract_sql("SELECT " + "(" * 300 + "1" + ")" * 300) is None

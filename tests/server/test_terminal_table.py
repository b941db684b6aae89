"""The `ask` command's result table."""

from __future__ import annotations

from mcp_server.terminal_table import MAX_CELL, format_table


def test_columns_align_numbers_right_and_nulls_show():
    text = format_table(["city", "n"], [["London", 12], ["New York", None], ["x" * 100, 3]])
    header, rule, *rows = text.splitlines()
    assert header.split() == ["city", "n"]
    assert len(rule.split()[0]) == MAX_CELL
    assert rows[0].endswith(" 12") and rows[1].endswith("NULL")
    assert rows[2].startswith("x" * (MAX_CELL - 1) + "…")
    assert len({line.index(line.split()[-1]) + len(line.split()[-1]) for line in rows}) == 1

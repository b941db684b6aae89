"""The run_query tool: one read-only query, its result cut near 2,000 tokens unless max_rows asks for more."""

from __future__ import annotations

from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from dbtools.engines import Database, QueryResult
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.errors import name_hints
from mcp_server.tools.results import COUNT_BUDGET_S, rows_result

# run_query without max_rows: a result of about 2,000 tokens.
DEFAULT_RESULT_ROWS = 50
DEFAULT_RESULT_CHARS = 6_000


def run_query(
    context: ToolContext,
    sql: Annotated[str, Field(min_length=1, description="one read-only SELECT")],
    max_rows: Annotated[int | None, Field(ge=1)] = None,
    source: SourceArgument = None,
) -> CallToolResult:
    """Run one read-only query; without max_rows the result is cut near 2,000 tokens."""
    state = context.state(source)
    cap = state.source.max_rows
    with context.database(state) as db, name_hints(db, sql):
        if max_rows is not None:
            result = db.query(sql, max_rows=min(max_rows, cap))
            if max_rows > cap and result.truncated and result.row_count == cap:
                result.truncation = (
                    f"{rows_left(db, sql, result)} left out: max_rows {max_rows:,} is above this source's cap of "
                    f"{cap:,} rows (--max-rows, SQLSCOUT_MAX_ROWS, or max_rows in the configuration file); get the "
                    "rest with LIMIT/OFFSET, a narrower WHERE, or aggregate in SQL"
                )
            return rows_result(result)
        result = db.query(sql, max_rows=min(DEFAULT_RESULT_ROWS, cap), max_chars=DEFAULT_RESULT_CHARS)
        if result.truncated:
            result.truncation = (
                f"{rows_left(db, sql, result)} left out to keep the result near 2,000 tokens; get them with "
                f"max_rows (at most {cap:,}) or LIMIT/OFFSET, or aggregate in SQL"
            )
        return rows_result(result)


def rows_left(db: Database, sql: str, result: QueryResult) -> str:
    """How many rows a cut result left out, in words; just "more rows" when counting them takes too long."""
    total = db.count_rows(sql, timeout_s=min(COUNT_BUDGET_S, db.timeout_s))
    return f"{total - result.row_count:,} more rows" if total is not None else "more rows"

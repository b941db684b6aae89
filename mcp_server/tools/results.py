"""How the tools shape their results: structured content with its fenced text, row counts within a budget, and
the rows result that run_query and sample_rows share."""

from __future__ import annotations

import time
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from dbtools.engines import Database, QueryResult, TableInfo
from dbtools.plural import counted
from mcp_server.untrusted import fence

# A count scans a whole table or runs a view's query: one listing spends at most this long counting, and
# the tables it has no time left for show an unknown row count.
COUNT_BUDGET_S = 3.0


def structured(content: BaseModel | dict[str, Any], summary: str, body: str) -> CallToolResult:
    """A tool result: `content` as structured content (a dict is already JSON-ready), its readable form fenced
    as untrusted text."""
    return CallToolResult(
        content=[TextContent(type="text", text=fence(summary, body))],
        structured_content=content if isinstance(content, dict) else content.model_dump(mode="json"),
    )


def counting_deadline() -> float:
    """When a listing that starts counting now must stop (time.monotonic())."""
    return time.monotonic() + COUNT_BUDGET_S


def row_count(db: Database, info: TableInfo, deadline: float | None = None) -> int | None:
    """The table's row count or estimate (Database.row_count), None when counting would pass the `deadline`
    (time.monotonic())."""
    timeout_s = db.timeout_s if deadline is None else min(db.timeout_s, deadline - time.monotonic())
    return db.row_count(info, timeout_s=timeout_s)


def rows_result(result: QueryResult) -> CallToolResult:
    """A query's rows as a tool result: the rows with their column types, the count and time, how it was cut."""
    rows = result.to_dict()
    del rows["sql"]  # the caller's own statement: echoing it costs context and says nothing new
    more = f"; {rows['truncation']}" if rows["truncation"] else ""
    summary = f"{counted(rows['row_count'], 'row')} in {rows['elapsed_ms']:.0f} ms{more}."
    header = " | ".join(
        f"{name} ({kind})" if kind else name
        for name, kind in zip(rows["columns"], rows["column_types"], strict=True)
    )
    return structured(rows, summary, "\n".join([header, *result.lines]))

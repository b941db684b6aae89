"""The list_tables tool: the tables with their column and row counts, remembered until the catalog changes."""

from __future__ import annotations

import fnmatch
from functools import partial
from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from dbtools.engines import Database, TableInfo
from dbtools.plural import counted
from mcp_server.server_models import TableList, TableSummary
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.errors import database_errors
from mcp_server.tools.results import counting_deadline, row_count, structured


def list_tables(
    context: ToolContext,
    pattern: Annotated[str | None, Field(description="substring or glob, e.g. 'order*'")] = None,
    limit: Annotated[int, Field(ge=1, le=1000)] = 200,
    source: SourceArgument = None,
) -> CallToolResult:
    """List tables with their column and row counts; pattern filters by substring or glob."""
    state = context.state(source)
    return context.remembered(state, ("list_tables", pattern, limit), partial(_listing, pattern, limit))


def _listing(pattern: str | None, limit: int, db: Database) -> tuple[CallToolResult, bool]:
    """The listing, and whether it may be remembered (every row count known)."""
    with database_errors():
        tables = db.tables()
    if pattern:
        needle = pattern.lower()
        glob = any(ch in needle for ch in "*?[")
        tables = [
            t
            for t in tables
            if (fnmatch.fnmatch(t.name.lower(), needle) if glob else needle in t.name.lower())
        ]
    deadline = counting_deadline()
    result = TableList(
        tables=[table_summary(db, t, deadline) for t in tables[:limit]],
        total=len(tables),
        truncated=len(tables) > limit,
    )
    lines = [
        f"{t.name} ({counted(t.column_count, 'column')}, "
        + (counted(t.row_count, "row") if t.row_count is not None else "? rows")
        + ")"
        + (f": {t.description}" if t.description else "")
        for t in result.tables
    ]
    more = f"; showing {limit}, narrow with a pattern" if result.truncated else ""
    complete = all(t.row_count is not None for t in result.tables)
    return structured(result, f"{counted(result.total, 'table')}{more}.", "\n".join(lines)), complete


def table_summary(db: Database, info: TableInfo, deadline: float | None = None) -> TableSummary:
    """One table's entry in the listing; its row count None when counting would pass the `deadline`."""
    return TableSummary(
        name=info.name,
        column_count=len(info.columns),
        row_count=row_count(db, info, deadline),
        description=info.comment,
    )

"""The sample_rows tool: the first rows of a table."""

from __future__ import annotations

from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.results import rows_result


def sample_rows(
    context: ToolContext,
    table: str,
    limit: Annotated[int, Field(ge=1, le=100)] = 5,
    source: SourceArgument = None,
) -> CallToolResult:
    """The first rows of a table."""
    state = context.state(source)
    with context.database(state) as db:
        info = db.table(table)
        return rows_result(db.table_rows(info, min(limit, state.source.max_rows)))

"""The search_schema tool: the tables and columns whose names, types or comments match keywords."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from dbtools.plural import counted
from dbtools.schema_search import search_schema as find_schema_matches
from mcp_server.server_models import SchemaMatches
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.results import structured


def search_schema(
    context: ToolContext,
    keywords: Annotated[str, Field(min_length=1)],
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    source: SourceArgument = None,
) -> CallToolResult:
    """Find the tables and columns whose names, types or comments match keywords."""
    with context.database(context.state(source)) as db:
        try:
            matches = find_schema_matches(db, keywords, limit=limit)
        except ValueError as error:
            raise ToolError(f"search_schema: {error}") from error
    result = SchemaMatches(keywords=keywords, matches=[m.to_dict() for m in matches])
    body = "\n".join(
        (f"{m.table}.{m.column} {m.type or ''}" if m.column else f"table {m.table}")
        + (f" -- {m.comment}" if m.comment else "")
        + f" (matched: {', '.join(m.matched)})"
        for m in result.matches
    )
    found = counted(len(result.matches), "matching table or column", "matching tables and columns")
    return structured(result, f"{found}.", body or "(none)")

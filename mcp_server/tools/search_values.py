"""The search_values tool: which columns store a literal and how it is spelled there, from the source's value
index."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from dbtools.engines import Database
from dbtools.plural import counted
from dbtools.value_search import ValueIndex
from mcp_server.server_models import ValueMatch, ValueMatches
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import SourceState, ToolContext
from mcp_server.tools.results import structured


def search_values(
    context: ToolContext,
    text: Annotated[str, Field(min_length=1, description="as the user wrote it, e.g. 'new york'")],
    table: Annotated[str | None, Field()] = None,
    column: Annotated[str | None, Field(description="needs table")] = None,
    source: SourceArgument = None,
) -> CallToolResult:
    """Find which columns store a literal and how it is spelled there (any case, partial, typos)."""
    if column and not table:
        raise ToolError("search_values: give the table as well when you give a column")
    state = context.state(source)
    with context.database(state) as db:
        try:
            matches = value_index(state, db).search(text, table=table, column=column)
        except ValueError as error:
            raise ToolError(f"search_values: {error}") from error
    result = ValueMatches(text=text, matches=[m.to_dict() for m in matches])
    body = "\n".join(value_match_line(m) for m in result.matches)
    holding = counted(len(result.matches), "column holds", "columns hold")
    return structured(result, f"{holding} values close to the text.", body or "(none)")


def value_index(state: SourceState, db: Database) -> ValueIndex:
    """The source's value index, opened on first use (building it reads every text column once)."""
    with state.index_lock:
        if state.values is None:
            state.values = ValueIndex(db)
        return state.values


def value_match_line(match: ValueMatch) -> str:
    """One match as a line: where the value lives, how it is spelled, which keys lead to and from it."""
    line = (
        f"{match.table}.{match.column} ({match.match_type}, {counted(match.matching_rows, 'row')}): "
        + ", ".join(repr(v) for v in match.values)
    )
    if match.row_keys:
        line += "; row keys " + ", ".join(f"{k}={v!r}" for k, v in match.row_keys.items())
    if match.foreign_keys:
        line += "; joins " + ", ".join(match.foreign_keys)
    return line

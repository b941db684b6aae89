"""The list_sources tool: the databases served, whether each is reachable now, and ask_database's model."""

from __future__ import annotations

from mcp_types import CallToolResult

from dbtools.plural import counted
from mcp_server.identities import current_identity
from mcp_server.server_models import SourceList
from mcp_server.source_tools import source_summaries
from mcp_server.tools.context import ToolContext
from mcp_server.tools.results import structured


def list_sources(context: ToolContext) -> CallToolResult:
    """The databases served (engine, description, table count, reachable now) and ask_database's model."""
    visible = [source for source in context.sources if context.visible(source.name)]
    extra = context.identities.rules_of(current_identity.get())
    result = SourceList(sources=source_summaries(visible, extra), model=context.runner.status)
    lines = [
        f"{s.name} ({s.engine}"
        + (f", {counted(s.table_count, 'table')})" if s.reachable else f", unreachable: {s.error})")
        + (f": {s.description}" if s.description else "")
        + (f"\n  warning: {s.warning}" if s.warning else "")
        for s in result.sources
    ]
    # The model's state is the server's own word: outside the fence that marks database content.
    summary = f"{counted(len(result.sources), 'source')}; ask_database's model: {result.model}."
    return structured(result, summary, "\n".join(lines))

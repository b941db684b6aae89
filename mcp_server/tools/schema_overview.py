"""The schema overview resource: every table with its row count and a one-line description, as Markdown."""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError

from dbtools.plural import counted
from mcp_server.tools.context import ToolContext
from mcp_server.tools.results import counting_deadline, row_count
from mcp_server.untrusted import fence

OVERVIEW_URI = "schema://overview"


def schema_overview(context: ToolContext, named: bool) -> str:
    """Markdown: one line per table with its row count and a one-line description; a section per source when
    the sources are `named`. The only source's failure fails the overview; one of several is noted in it."""
    sections = []
    for source in context.sources:
        if not context.visible(source.name):
            continue
        try:
            sections.append(_source_section(context, source.name, named))
        except ToolError as error:
            if not named:
                raise
            sections.append(f"# Source {source.name}: cannot be read now\n\n{error}")
    return fence(f"Schema overview; ask_database's model: {context.runner.status}.", "\n\n".join(sections))


def _source_section(context: ToolContext, name: str, named: bool) -> str:
    state = context.state(name)
    with context.database(state) as db:
        tables = db.tables()
        title = f"source {name}: {db.display_name}" if named else db.display_name
        lines = [f"# Tables of {title} ({db.dialect}, {counted(len(tables), 'table')})", ""]
        deadline = counting_deadline()
        for info in tables:
            rows = row_count(db, info, deadline)
            count = counted(rows, "row") if rows is not None else "row count unknown"
            about = info.comment or "columns: " + ", ".join(c.name for c in info.columns[:8]) + (
                ", ..." if len(info.columns) > 8 else ""
            )
            lines.append(f"- **{info.name}** ({count}): {about}")
    return "\n".join(lines)

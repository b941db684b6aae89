"""The explain_query tool: the engine's plan for a query, without running it."""

from __future__ import annotations

from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from mcp_server.server_models import QueryPlan
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.errors import name_hints
from mcp_server.tools.results import structured


def explain_query(
    context: ToolContext,
    sql: Annotated[str, Field(min_length=1, description="one read-only SELECT")],
    source: SourceArgument = None,
) -> CallToolResult:
    """The engine's plan for a query, without running it."""
    with context.database(context.state(source)) as db, name_hints(db, sql):
        plan = QueryPlan(sql=sql, plan=db.explain(sql))
    return structured(plan, f"Plan ({db.dialect} EXPLAIN):", plan.plan)

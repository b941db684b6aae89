"""The describe_table tool: one table's columns, keys both ways and CREATE TABLE, remembered until the catalog
changes."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from dbtools.engines import Database
from mcp_server.server_models import ColumnDetail, ForeignKeyDetail, TableDescription
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.errors import database_errors
from mcp_server.tools.results import row_count, structured


def describe_table(
    context: ToolContext,
    table: Annotated[str, Field(description="schema.table outside public")],
    source: SourceArgument = None,
) -> CallToolResult:
    """One table's columns, types, keys, foreign keys both ways and CREATE TABLE."""
    state = context.state(source)
    return context.remembered(state, ("describe_table", table), partial(_description, table))


def _description(table: str, db: Database) -> tuple[CallToolResult, bool]:
    """The description, and whether it may be remembered (its row count known)."""
    with database_errors():
        info = db.table(table)
        referenced_by = sorted(
            t.name for t in db.tables() if any(fk.ref_table == info.name for fk in t.foreign_keys)
        )
    result = TableDescription(
        name=info.name,
        description=info.comment,
        row_count=row_count(db, info),
        columns=[
            ColumnDetail(
                name=c.name,
                type=c.type,
                nullable=c.nullable,
                primary_key=c.primary_key,
                comment=c.comment,
            )
            for c in info.columns
        ],
        foreign_keys=[
            ForeignKeyDetail(
                columns=list(fk.columns), ref_table=fk.ref_table, ref_columns=list(fk.ref_columns)
            )
            for fk in info.foreign_keys
        ],
        referenced_by=referenced_by,
        create_sql=info.create_sql,
    )
    body = info.create_sql + (f"\nreferenced by: {', '.join(referenced_by)}" if referenced_by else "")
    return structured(result, f"Table {info.name}:", body), result.row_count is not None

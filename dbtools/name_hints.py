"""When an engine rejects a query for a table or column it does not know, the catalog's closest names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dbtools.engines.base import closest_names
from dbtools.errors import UnknownObjectError

if TYPE_CHECKING:
    from dbtools.engines import Database, TableInfo

# SQLite's, PostgreSQL's, MySQL's and DuckDB's wording for an unknown relation and an unknown column.
_UNKNOWN_TABLE = re.compile(
    r"^(?:no such table: (\S+)|relation \"([^\"]+)\" does not exist|Table '([^']+)' doesn't exist"
    r"|Catalog Error: Table with name (\S+) does not exist)"
)
_UNKNOWN_COLUMN = re.compile(
    r"^(?:no such column: (\S+)|column \"?([^\"\s]+)\"? does not exist|Unknown column '([^']+)'"
    r"|Binder Error: Referenced column \"([^\"]+)\" not found"
    r"|Binder Error: Table \"[^\"]+\" does not have a column named \"([^\"]+)\")"
)


def unknown_name_hint(db: Database, sql: str, message: str) -> str:
    """A line naming the tables or columns closest to the unknown one in `message`, else ""."""
    if found := _UNKNOWN_TABLE.match(message):
        name = _last_part(next(g for g in found.groups() if g))
        close = closest_names(name, [t.name for t in db.tables()])
        return f"closest tables: {', '.join(close)}" if close else ""
    if found := _UNKNOWN_COLUMN.match(message):
        name = _last_part(next(g for g in found.groups() if g))
        tables = _tables_of(db, sql) or db.tables()
        owners: dict[str, list[str]] = {}
        for table in tables:
            for column in table.columns:
                owners.setdefault(column.name, []).append(table.name)
        close = closest_names(name, list(owners))
        named = [f"{c} ({', '.join(owners[c])})" for c in close]
        return f"closest columns: {', '.join(named)}" if named else ""
    return ""


def _last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _tables_of(db: Database, sql: str) -> list[TableInfo]:
    """The catalog's tables that the query names (common table expressions and unknown names left out)."""
    try:
        parsed = sqlglot.parse_one(sql, read=db.dialect)
    except SqlglotError:
        return []
    found = []
    for table in parsed.find_all(exp.Table):
        try:
            info = db.table(".".join(p for p in (table.db, table.name) if p))
        except UnknownObjectError:
            continue
        if info not in found:
            found.append(info)
    return found

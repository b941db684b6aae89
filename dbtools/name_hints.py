"""Table and column names as people write them: the case-insensitive lookup, and the catalog's closest names
when one is unknown, whether to the catalog or to an engine that rejected a query."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

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


def lookup_name(by_name: dict, name: str) -> object | None:
    """Exact match first, then the one case-insensitive match (None when there are several)."""
    if name in by_name:
        return by_name[name]
    lowered = name.lower()
    matches = [v for k, v in by_name.items() if k.lower() == lowered]
    return matches[0] if len(matches) == 1 else None


def closest_names(name: str, candidates: Sequence[str]) -> list[str]:
    """Up to three of `candidates` that look like `name`, closest first; case is ignored."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.5)
    if not close:
        # Names in big schemas are often prefixed or suffixed variants; substring hits are close too.
        close = [c for c in by_lower if name.lower() in c or c in name.lower()][:3]
    return [by_lower[c] for c in close]


def closest_hint(name: str, candidates: Sequence[str], kind: str) -> str:
    """A suffix naming the candidates close to `name` ("; closest: a, b"), else how many `kind` exist."""
    close = closest_names(name, candidates)
    if close:
        return "; closest: " + ", ".join(close)
    return f"; {len(candidates)} {kind} exist" if candidates else f"; no {kind} exist"


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

"""A database seen through a source's visibility rules: the catalog without hidden tables and columns, and
every statement rewritten by HiddenDataGuard before it runs, so no tool and no agent reads what is hidden."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator, Sequence

import sqlglot
from sqlglot import exp

from dbtools.engines import Database, QueryResult, TableInfo
from dbtools.errors import DatabaseToolError
from dbtools.hidden_query import HiddenDataGuard
from dbtools.visibility import VisibilityRules, table_names

# CREATE [OR REPLACE] [ALGORITHM=... DEFINER=... SQL SECURITY ...] [MATERIALIZED] VIEW name AS ... (MySQL's
# SHOW CREATE VIEW puts its options in between); a table's statement names no VIEW before its columns.
VIEW_STATEMENT = re.compile(r"\s*create\b[^(]*?\bview\b", re.IGNORECASE)


def view_definition(create_sql: str, dialect: str) -> exp.Expression | None:
    """The query of a `CREATE VIEW ... AS query` statement; None when it does not parse as one."""
    try:
        statement = sqlglot.parse_one(create_sql, read=dialect)
    except sqlglot.errors.ParseError:
        return None
    query = statement.expression if isinstance(statement, exp.Create) else None
    return query if isinstance(query, exp.Query) else None


# Engines whose own grants can enforce the rules: the role sqlscout connects as should lack them.
SERVER_DIALECTS = ("postgres", "mysql")


class GuardedDatabase:
    """`inner` under `rules`; everything not overridden here is the inner database's. `in_engine`: the engine is
    told to enforce the hidden columns itself where it can (once per database: the source's own rules)."""

    def __init__(self, inner: Database, rules: VisibilityRules, in_engine: bool = True) -> None:
        self._inner = inner
        self.rules = rules
        self._lock = threading.Lock()
        self._built: tuple[int, list[TableInfo], HiddenDataGuard] | None = None
        self._rules_digest = hashlib.sha256(repr(rules).encode()).hexdigest()[:16]
        if in_engine and hasattr(inner, "hide"):
            # The engine enforces the hidden columns itself too (SQLite's authorizer).
            inner.hide(
                lambda table, column: not (rules.table_visible(table) and rules.column_visible(table, column))
            )

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def _view(self) -> tuple[list[TableInfo], HiddenDataGuard]:
        """The visible catalog and its guard, built again when the inner catalog changes."""
        catalog = self._inner.tables()
        generation = self._inner._catalog_generation  # moves on each time the catalog is read again
        with self._lock:
            if self._built is None or self._built[0] != generation:
                self._built = (generation, *self._visible_catalog(catalog))
            return self._built[1], self._built[2]

    def _visible_catalog(self, catalog: list[TableInfo]) -> tuple[list[TableInfo], HiddenDataGuard]:
        """The visible tables and the guard over them. A view that reads what the rules touch is read through
        its definition, so that its rows are filtered too; one whose definition the rules refuse (it reads a
        hidden column or table) is hidden itself."""
        dialect = self._inner.dialect
        visible = self.rules.visible_tables(catalog, self._inner.quote)
        plain_guard = HiddenDataGuard(dialect, visible, self.rules)
        touched = {name.lower() for info in catalog if self._touched(info) for name in table_names(info.name)}
        views, refused = {}, set()
        for info in visible:
            if not VIEW_STATEMENT.match(info.create_sql):
                continue
            definition = view_definition(info.create_sql, dialect)
            if definition is None:  # a view it cannot read might read anything
                refused.add(info.name)
                continue
            if not any(t.name.lower() in touched for t in definition.find_all(exp.Table)):
                continue
            try:
                plain_guard.rewrite(definition.sql(dialect=dialect))
            except DatabaseToolError:
                refused.add(info.name)
                continue
            views[info.name.lower()] = definition
        shown = [info for info in visible if info.name not in refused]
        return shown, HiddenDataGuard(dialect, shown, self.rules, views)

    def _touched(self, info: TableInfo) -> bool:
        """Whether the rules hide the table, one of its columns, or some of its rows."""
        rules = self.rules
        return (
            not rules.table_visible(info.name)
            or any(not rules.column_visible(info.name, c.name) for c in info.columns)
            or bool(rules.row_filters_of(info.name))
        )

    def tables(self) -> list[TableInfo]:
        return self._view()[0]

    def table(self, name: str) -> TableInfo:
        # The base class's lookup, over the visible tables: its hints never name a hidden one.
        return Database.table(self, name)  # type: ignore[arg-type]

    def rewritten(self, sql: str) -> str:
        """`sql` after the read-only policy, rewritten to read only what is visible."""
        self._inner._check(sql)
        return self._view()[1].rewrite(sql)

    def query(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        max_chars: int | None = None,
        timeout_s: float | None = None,
    ) -> QueryResult:
        result = self._inner._query_checked(
            self.rewritten(sql), max_rows=max_rows, max_chars=max_chars, timeout_s=timeout_s
        )
        result.sql = sql
        return result

    def explain(self, sql: str, *, timeout_s: float | None = None) -> str:
        return self._inner.explain(self.rewritten(sql), timeout_s=timeout_s)

    def count_rows(self, sql: str, *, timeout_s: float) -> int | None:
        try:
            return self._inner.count_rows(self.rewritten(sql), timeout_s=timeout_s)
        except DatabaseToolError:
            return None

    def table_rows(self, table: TableInfo, limit: int, *, timeout_s: float | None = None) -> QueryResult:
        columns = ", ".join(self._inner.quote(c.name) for c in table.columns)
        sql = self._view()[1].rewrite(
            f"SELECT {columns} FROM {self._inner.quote(table.name)} LIMIT {int(limit)}"
        )
        return self._inner._query_checked(sql, max_rows=limit, timeout_s=timeout_s)

    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        """The value index's and the counts' reads, rewritten like any query (they name only visible columns)."""
        return self._inner.stream(self._view()[1].rewrite(sql), params, timeout_s=timeout_s)

    def row_count(self, info: TableInfo, *, timeout_s: float) -> int | None:
        if not (self.rules.row_filters_of(info.name) or self._view()[1].is_view_over_rules(info.name)):
            return self._inner.row_count(info, timeout_s=timeout_s)
        try:
            [(count,)] = list(
                self.stream(f"SELECT COUNT(*) FROM {self._inner.quote(info.name)}", timeout_s=timeout_s)
            )
        except DatabaseToolError:
            return None
        return count

    def readable_hidden(self) -> list[str]:
        """The hidden tables and columns that the database role itself may read (each tried with a query that
        returns no row): on a server, the rules then hold in this program only."""
        if self._inner.dialect not in SERVER_DIALECTS:
            return []  # SQLite enforces them itself; a DuckDB file is the user's own
        readable = []
        for info in self._inner.tables():
            if not self.rules.table_visible(info.name):
                hidden = [(info.name, None)]
            else:
                hidden = [
                    (info.name, c.name)
                    for c in info.columns
                    if not self.rules.column_visible(info.name, c.name)
                ]
            for table, column in hidden:
                what = self._inner.quote(column) if column else "1"
                try:
                    list(self._inner.stream(f"SELECT {what} FROM {self._inner.quote(table)} WHERE 1 = 0"))
                except DatabaseToolError:
                    continue
                readable.append(f"{table}.{column}" if column else table)
        return readable

    def fingerprint(self, table: str) -> str:
        # A value index built under other rules (or none) must not be reused under these.
        return f"{self._inner.fingerprint(table)}:{self._rules_digest}"

    def close(self) -> None:
        self._inner.close()

    def __repr__(self) -> str:
        return f"GuardedDatabase({self._inner!r})"

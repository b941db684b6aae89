"""A database seen through a rule set: the catalog without hidden tables and columns, every statement run over
visible-only relations (visible_query.py), plans shown by their shape, and engine errors that name a hidden
object replaced, so that no tool and no agent reads what is hidden."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlglot
from sqlglot import exp

from dbtools.access.functions import function_refusal
from dbtools.access.plan_shape import plan_shape
from dbtools.access.rule_check import check_rules
from dbtools.access.rules import VisibilityRules, table_names
from dbtools.access.visible_query import VisibleQueries
from dbtools.engines import Database, QueryResult, TableInfo
from dbtools.engines.database import refuse_explain_of_explain
from dbtools.errors import DatabaseToolError, QueryError
from dbtools.safety import check_query

# CREATE [OR REPLACE] [ALGORITHM=... DEFINER=... SQL SECURITY ...] [MATERIALIZED] VIEW name AS ... (MySQL's
# SHOW CREATE VIEW puts its options in between); a table's statement names no VIEW before its columns.
VIEW_STATEMENT = re.compile(r"\s*create\b[^(]*?\bview\b", re.IGNORECASE)
# Where an engine quotes the statement it ran (which holds the row filters): PostgreSQL's and DuckDB's LINE n:
# context with its caret line, MySQL's "near '...' at line n".
_STATEMENT_CONTEXT = re.compile(r"(?ms)^\s*LINE \d+:.*?(?=^\S|\Z)|near '.*' at line \d+")
# What only the rewritten statement holds: an error that quotes it otherwise (a column named by its text) is
# replaced whole.
_REWRITTEN_MARKS = ("sqlscout_", "LIMIT -1 OFFSET 0", "OFFSET 0)", "18446744073709551615")
REWRITTEN_ERROR = (
    "the query failed on an expression of it as the rules rewrote it: give that expression an alias"
)
# Engines whose own grants can enforce the rules: the role sqlscout connects as should lack them.
SERVER_DIALECTS = ("postgres", "mysql")
NAMELESS_ERROR = (
    "the query failed on a name it uses that does not exist here: check the tables and columns it names"
)


def view_definition(create_sql: str, dialect: str) -> exp.Query | None:
    """The query of a `CREATE VIEW name [(columns)] AS query` statement, its result columns named as the view
    names them; None when it does not parse as one, or names its columns where the query has a star."""
    try:
        statement = sqlglot.parse_one(create_sql, read=dialect)
    except sqlglot.errors.ParseError:
        return None
    query = statement.expression if isinstance(statement, exp.Create) else None
    if not isinstance(query, exp.Query):
        return None
    named = statement.this.expressions if isinstance(statement.this, exp.Schema) else []
    if not named:
        return query
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select) or len(select.expressions) != len(named) or select.is_star:
        return None
    select.set(
        "expressions",
        [
            exp.alias_(p.unalias() if isinstance(p, exp.Alias) else p, n.copy())
            for p, n in zip(select.expressions, named, strict=True)
        ],
    )
    return query


def calls_unlisted_function(query: exp.Expression, dialect: str) -> bool:
    """Whether `query` calls a function off the allow list (a user's function or macro can read anything)."""
    return any(function_refusal(node, dialect) for node in query.find_all(exp.Func))


class GuardedDatabase:
    """`inner` under `rules`; everything not overridden here is the inner database's. `checked`: the rule sets
    whose fit to the catalog is checked, each naming its own configuration keys (a source's and an identity's)."""

    def __init__(
        self, inner: Database, rules: VisibilityRules, checked: tuple[VisibilityRules, ...] | None = None
    ) -> None:
        self._inner = inner
        self.rules = rules
        self._checked = checked if checked is not None else (rules,)
        self._lock = threading.Lock()
        self._built: tuple[int, list[TableInfo], VisibleQueries, frozenset[str]] | None = None
        self._rules_digest = hashlib.sha256(repr(rules).encode()).hexdigest()[:16]

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    @property
    def cache_key(self) -> str:
        """What anything derived from this database under these rules is stored by: never another rule set's."""
        return f"{self._inner.cache_key}:rules-{self._rules_digest}"

    def _view(self) -> tuple[list[TableInfo], VisibleQueries, frozenset[str]]:
        """The visible catalog, its rewriting and the hidden names, built again when the inner catalog changes."""
        catalog = self._inner.tables()
        generation = self._inner._catalog_generation  # moves on each time the catalog is read again
        with self._lock:
            if self._built is None or self._built[0] != generation:
                for rules in self._checked:
                    check_rules(self._inner, catalog, rules)
                self._built = (generation, *self._visible_catalog(catalog))
            return self._built[1], self._built[2], self._built[3]

    def _visible_catalog(
        self, catalog: list[TableInfo]
    ) -> tuple[list[TableInfo], VisibleQueries, frozenset[str]]:
        """The visible tables, the rewriting over them and the names that are hidden. A view that reads what the
        rules touch is read through its definition, so that its rows are filtered too; one whose definition does
        not compile over the visible relations (it reads a hidden column or table) is hidden itself."""
        views = self._views_over_rules(catalog)
        excluded = {name for name, definition in views.items() if definition is None}
        readable = {name: definition for name, definition in views.items() if definition is not None}
        queries = VisibleQueries(self._inner, catalog, self.rules, readable, excluded)
        failing = {name for name in readable if not self._compiles(queries, name)}
        if failing:
            excluded |= failing
            queries = VisibleQueries(self._inner, catalog, self.rules, readable, excluded)
        visible = [
            info
            for info in self.rules.visible_tables(catalog, self._inner.quote)
            if info.name not in excluded
        ]
        hidden: set[str] = set()
        for info in catalog:
            if not self.rules.table_visible(info.name) or info.name in excluded:
                hidden |= {part.lower() for part in info.name.split(".")}
            else:
                hidden |= {
                    c.name.lower() for c in info.columns if not self.rules.column_visible(info.name, c.name)
                }
        return visible, queries, frozenset(hidden)

    def _views_over_rules(self, catalog: list[TableInfo]) -> dict[str, exp.Query | None]:
        """The visible views that read, directly or through other views, what the rules touch, with their
        definitions; None for a view whose definition cannot be read or calls a function off the allow list (it
        might read anything): such a view is hidden."""
        dialect = self._inner.dialect
        touched = {name.lower() for info in catalog if self._touched(info) for name in table_names(info.name)}
        definitions = {
            info.name: view_definition(info.create_sql, dialect)
            for info in catalog
            if VIEW_STATEMENT.match(info.create_sql) and self.rules.table_visible(info.name)
        }
        views: dict[str, exp.Query | None] = {}
        for name, definition in definitions.items():
            if definition is not None and calls_unlisted_function(definition, dialect):
                views[name] = None
                touched |= {n.lower() for n in table_names(name)}
        grown = True
        while grown:
            grown = False
            for name, definition in definitions.items():
                read = (
                    {t.name.lower() for t in definition.find_all(exp.Table)}
                    if definition is not None
                    else set()
                )
                if name not in views and (definition is None or read & touched):
                    views[name] = definition
                    touched |= {n.lower() for n in table_names(name)}
                    grown = True
        return views

    def _compiles(self, queries: VisibleQueries, view: str) -> bool:
        try:
            rewritten = queries.rewrite(
                f"SELECT * FROM {self._inner.table_reference(view).sql(self._inner.dialect)}"
            )
        except DatabaseToolError:
            return False
        return not self._inner._compile_error(rewritten)

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
        """`sql` after the read-only policy, rewritten to run over visible-only relations. Text the policy cannot
        parse is refused as it is: the engine's own message about it would be about the whole catalog."""
        check_query(sql, self._inner.dialect)
        return self._view()[1].rewrite(sql)

    @contextmanager
    def _errors_about(self, sql: str) -> Iterator[None]:
        """Engine errors without the statement that ran (it holds the filters), and none that names a hidden table
        or column the query does not name itself."""
        try:
            yield
        except QueryError as error:
            text = _STATEMENT_CONTEXT.sub("", str(error)).strip()
            written = set(re.findall(r"\w+", sql.lower()))
            named = set(re.findall(r"\w+", text.lower()))
            if (named - written) & self._view()[2]:
                text = NAMELESS_ERROR
            elif any(mark in text for mark in _REWRITTEN_MARKS) or any(
                condition.strip() in text for _, condition in self.rules.row_filters
            ):
                text = REWRITTEN_ERROR
            raise QueryError(text) from None

    def query(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        max_chars: int | None = None,
        timeout_s: float | None = None,
    ) -> QueryResult:
        rewritten = self.rewritten(sql)
        with self._errors_about(sql):
            result = self._inner._query_checked(
                rewritten, max_rows=max_rows, max_chars=max_chars, timeout_s=timeout_s
            )
        result.sql = sql
        return result

    def explain(self, sql: str, *, timeout_s: float | None = None) -> str:
        refuse_explain_of_explain(sql)
        rewritten = self.rewritten(sql)
        with self._errors_about(sql):
            return plan_shape(self._inner, rewritten, timeout_s or self._inner.timeout_s)

    def count_rows(self, sql: str, *, timeout_s: float) -> int | None:
        try:
            return self._inner.count_rows(self.rewritten(sql), timeout_s=timeout_s)
        except DatabaseToolError:
            return None

    def table_rows(self, table: TableInfo, limit: int, *, timeout_s: float | None = None) -> QueryResult:
        columns = ", ".join(self._inner.quote(c.name) for c in table.columns)
        reference = self._inner.table_reference(table.name).sql(self._inner.dialect)
        sql = self._view()[1].rewrite(f"SELECT {columns} FROM {reference} LIMIT {int(limit)}")
        return self._inner._query_checked(sql, max_rows=limit, timeout_s=timeout_s)

    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        """The value index's and the counts' reads, rewritten like any query (they name only visible columns)."""
        return self._inner.stream(self._view()[1].rewrite(sql), params, timeout_s=timeout_s)

    def row_count(self, info: TableInfo, *, timeout_s: float) -> int | None:
        if not self._view()[1].touches(info.name):
            return self._inner.row_count(info, timeout_s=timeout_s)
        reference = self._inner.table_reference(info.name).sql(self._inner.dialect)
        try:
            [(count,)] = list(self.stream(f"SELECT COUNT(*) FROM {reference}", timeout_s=timeout_s))
        except DatabaseToolError:
            return None
        return count

    def readable_hidden(self) -> list[str]:
        """The hidden tables and columns that the database role itself may read (each tried with a query that
        returns no row): on a server, the rules then hold in this program only."""
        if self._inner.dialect not in SERVER_DIALECTS:
            return []  # a SQLite or DuckDB file is read with the file's own permissions
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

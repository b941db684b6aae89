"""The engine-independent base of every database: the read-only policy, the timeout and caps, the catalog."""

from __future__ import annotations

import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

from sqlglot import exp

from dbtools.engines.catalog import TableInfo
from dbtools.engines.result_caps import ResultCaps
from dbtools.engines.results import QueryResult, stored_type
from dbtools.errors import (
    DatabaseToolError,
    QueryError,
    UnknownObjectError,
    UnparsableQueryError,
    UnsafeQueryError,
)
from dbtools.name_hints import closest_hint, lookup_name
from dbtools.query_limits import QueryLimits
from dbtools.safety import check_query

logger = logging.getLogger(__name__)


def refuse_explain_of_explain(sql: str) -> None:
    """A plan is asked for with the query alone: EXPLAIN in front of it is the caller's."""
    if re.match(r"\s*explain\b", sql, re.IGNORECASE):
        raise UnsafeQueryError("send the query without EXPLAIN: the plan is asked for without running it")


class Database(ABC):
    """A read-only database. Thread-safe: every call may come from a different thread."""

    dialect: str  # sqlglot dialect: "sqlite" | "postgres" | "mysql" | "duckdb"
    placeholder: str  # parameter marker for stream(): "?" (SQLite, DuckDB) or "%s" (PostgreSQL, MySQL)
    # Whether TableInfo.create_sql already shows the table's and columns' comments (MySQL's COMMENT clauses).
    create_sql_has_comments = False
    # Seconds a schema check is reused: 0 checks at every call; an engine whose check reads big catalogs reuses
    # it, so a schema change shows within that time.
    schema_check_interval_s = 0.0
    # Whether two table names that differ only in case name two tables (MySQL/MariaDB, by the server's setting).
    case_sensitive_tables = False
    # Whether a result column without an alias is named after its text as written (SQLite, MySQL, DuckDB), and
    # whether that text takes in the comments after the expression (SQLite).
    result_names_by_text = True
    result_names_keep_comments = True

    def __init__(self, display_name: str, *, limits: QueryLimits) -> None:
        self.display_name = display_name
        self.limits = limits
        self._catalog_lock = threading.Lock()
        self._catalog: dict[str, TableInfo] | None = None
        self._catalog_marker: object = None
        self._catalog_generation = 0  # how many times the catalog was loaded
        self._schema_check: tuple[object, float] | None = None  # the last schema marker and when it was read
        self._counts: dict[str, tuple[object, int]] = {}  # table -> (data marker, row count)
        self._table_parts: dict[str, tuple[str, ...]] = {}  # table name -> its SQL name parts, filled on load

    @property
    def timeout_s(self) -> float:
        """Seconds a query may run where a call gives no timeout of its own."""
        return self.limits.timeout_s

    @property
    def max_rows(self) -> int:
        """The most rows a result keeps where a call gives no row cap of its own."""
        return self.limits.max_rows

    @property
    def max_chars(self) -> int:
        """The most characters a result keeps; a call may ask for fewer, never for more."""
        return self.limits.max_chars

    # --- queries -------------------------------------------------------------------------------------------
    def query(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        max_chars: int | None = None,
        timeout_s: float | None = None,
    ) -> QueryResult:
        """Validate `sql` with the read-only policy, then run it read-only under the timeout and caps."""
        self._check(sql)
        return self._query_checked(sql, max_rows=max_rows, max_chars=max_chars, timeout_s=timeout_s)

    def table_rows(self, table: TableInfo, limit: int, *, timeout_s: float | None = None) -> QueryResult:
        """The first `limit` rows of a table from the catalog, read-only under the timeout and caps.

        The statement is built here from the quoted catalog name and an integer, so it skips the parser's policy,
        which is there for SQL that users and models write; the engine's own read-only guards still apply."""
        sql = f"SELECT * FROM {self.quote(table.name)} LIMIT {int(limit)}"
        return self._query_checked(sql, max_rows=limit, timeout_s=timeout_s)

    def _query_checked(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        max_chars: int | None = None,
        timeout_s: float | None = None,
    ) -> QueryResult:
        """Run a statement that passed the policy (or that this program built) under the timeout and caps."""
        caps = ResultCaps(max_rows or self.max_rows, min(max_chars or self.max_chars, self.max_chars))
        started = time.perf_counter()
        described = self._run_capped(sql, caps, timeout_s or self.timeout_s)
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.debug(
            "%d rows in %.1f ms%s: %s",
            len(caps.collected),
            elapsed_ms,
            " (truncated)" if caps.truncation else "",
            sql,
        )
        return QueryResult(
            sql=sql,
            columns=[name for name, _ in described],
            column_types=[
                declared or stored_type(caps.collected, i) for i, (_, declared) in enumerate(described)
            ],
            rows=caps.collected,
            row_count=len(caps.collected),
            lines=caps.lines,
            truncated=caps.truncation is not None,
            elapsed_ms=elapsed_ms,
            truncation=caps.truncation,
        )

    def explain(self, sql: str, *, timeout_s: float | None = None) -> str:
        """The engine's plan for a query that `query` would accept, as indented text; the query is not run."""
        refuse_explain_of_explain(sql)
        self._check(sql)
        return self._plan(sql, timeout_s or self.timeout_s)

    def _check(self, sql: str) -> None:
        """The read-only policy's verdict on `sql`; where it cannot parse the text, the engine's own message."""
        try:
            check_query(sql, self.dialect)
        except UnparsableQueryError:
            # The engine's own message says what is wrong; text only the engine understands stays refused.
            engine_message = self._compile_error(sql)
            if engine_message:
                raise QueryError(engine_message) from None
            raise

    @abstractmethod
    def _plan(self, sql: str, timeout_s: float) -> str:
        """The plan of a checked statement, from the engine's EXPLAIN (never one that executes it)."""

    def count_rows(self, sql: str, *, timeout_s: float) -> int | None:
        """How many rows a statement that `query` accepted returns, counted by the engine; None when that takes
        longer than `timeout_s` or fails."""
        # The newline ends a trailing -- comment before the closing parenthesis.
        counting = f"SELECT count(*) FROM (\n{sql.strip().rstrip(';')}\n) AS counted"
        try:
            [(count,)] = list(self.stream(counting, timeout_s=timeout_s))
        except DatabaseToolError:
            return None
        return count

    @abstractmethod
    def _run_capped(self, sql: str, caps: ResultCaps, timeout_s: float) -> list[tuple[str, str | None]]:
        """Run a validated statement, feed rows to `caps` until it refuses one; return each column's name and
        its type where the engine declares one."""

    @abstractmethod
    def _compile_error(self, sql: str) -> str | None:
        """The engine's own message for a statement it cannot compile (nothing is run), else None."""

    @abstractmethod
    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        """Rows of SQL built by this program (identifiers quoted, values as params): read-only, no row cap.

        Consume the iterator or close it: it holds a connection until then.
        """

    # --- catalog -------------------------------------------------------------------------------------------
    def quote(self, identifier: str) -> str:
        """A quoted identifier; a schema-qualified table name ("sales.orders") is quoted part by part."""
        parts: tuple[str, ...] = (identifier,)
        if "." in identifier:
            self.tables()
            parts = self._table_parts.get(identifier) or tuple(identifier.split("."))
        return ".".join(exp.to_identifier(p, quoted=True).sql(self.dialect) for p in parts)

    @property
    def cache_key(self) -> str:
        """What anything derived from this database is stored by (the value index's file)."""
        return f"{self.dialect}:{getattr(self, 'path', None) or self.display_name}"

    def inheritance_parents(self) -> set[str]:
        """The catalog tables whose reference also reads other tables' rows (PostgreSQL's inheritance)."""
        return set()

    @property
    def written_dialect(self):
        """The sqlglot dialect queries this program writes out for the engine are generated in."""
        return self.dialect

    def result_name(self, text: str) -> str | None:
        """The name the engine gives a result column without an alias written as `text` (an expression), where
        result_names_by_text; None where it cannot tell."""
        return text

    def table_reference(self, name: str) -> exp.Table:
        """The catalog table `name` as a reference the engine can bind to nothing else: each part quoted as the
        catalog spells it, schema-qualified where the catalog keeps schemas."""
        self.tables()
        parts = self._table_parts.get(name) or (name,)
        return exp.table_(*[exp.to_identifier(p, quoted=True) for p in reversed(parts)])

    def tables(self) -> list[TableInfo]:
        """Every user table and view, in catalog order; reloaded when the schema changes."""
        marker = self._checked_schema_marker()
        with self._catalog_lock:
            if self._catalog is None or marker != self._catalog_marker:
                self._catalog = {t.name: t for t in self._load_tables()}
                self._catalog_marker = marker
                self._catalog_generation += 1
            return list(self._catalog.values())

    def catalog_state(self) -> object | None:
        """A value that stays equal while neither the schema nor any table's row count changes, to remember what
        is derived from both (a listing, a description); None where the engine cannot tell that rows changed.

        Take it before reading what it covers: a change in between then only makes the next call miss."""
        tables = self.tables()
        generation = self._catalog_generation
        data = self._data_marker()
        if data is None and any(t.row_estimate is None for t in tables):
            return None
        return (generation, data)

    def table(self, name: str) -> TableInfo:
        """The table called `name` (case-insensitive, quotes allowed); UnknownObjectError with close matches."""
        by_name = {t.name: t for t in self.tables()}
        cleaned = self._normalise_table_name(name)
        found = lookup_name(by_name, cleaned)
        if found is None:
            raise UnknownObjectError(
                f'no table named "{name}"' + closest_hint(cleaned, list(by_name), "tables")
            )
        return found

    def _normalise_table_name(self, name: str) -> str:
        parts = [p.strip().strip('"`[]') for p in name.strip().split(".")]
        return ".".join(parts)

    @abstractmethod
    def _load_tables(self) -> list[TableInfo]:
        """Read the whole catalog."""

    @abstractmethod
    def _schema_marker(self) -> object:
        """A cheap value that changes whenever the schema does."""

    def _checked_schema_marker(self) -> object:
        """The schema marker, read again once the last reading is schema_check_interval_s old."""
        # One tuple, replaced whole: threads racing here at worst both read the marker.
        last = self._schema_check
        if last is not None and time.monotonic() - last[1] < self.schema_check_interval_s:
            return last[0]
        marker = self._schema_marker()
        self._schema_check = (marker, time.monotonic())
        return marker

    def row_count(self, info: TableInfo, *, timeout_s: float) -> int | None:
        """The catalog's row estimate where the engine keeps one (PostgreSQL), else a count, remembered while the
        data stays unchanged; None when counting fails or would take longer than `timeout_s`."""
        if info.row_estimate is not None:
            return info.row_estimate
        marker = self._data_marker()
        remembered = self._counts.get(info.name)
        if marker is not None and remembered is not None and remembered[0] == marker:
            return remembered[1]
        if timeout_s <= 0:
            return None
        try:
            [(count,)] = list(
                self.stream(f"SELECT COUNT(*) FROM {self.quote(info.name)}", timeout_s=timeout_s)
            )
        except DatabaseToolError:
            return None
        if marker is not None:
            self._counts[info.name] = (marker, count)
        return count

    def _data_marker(self) -> object | None:
        """A cheap value that changes whenever any table's rows may have; None where the engine has none, and
        counts are then never remembered."""
        return None

    @abstractmethod
    def fingerprint(self, table: str) -> str:
        """A cheap marker that changes when the table's rows do."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display_name!r})"

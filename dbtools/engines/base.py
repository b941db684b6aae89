"""The engine-independent database interface: catalog records, query results and the Database base class."""

from __future__ import annotations

import datetime
import decimal
import difflib
import json
import logging
import math
import re
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from dbtools.errors import (
    DatabaseToolError,
    QueryError,
    UnknownObjectError,
    UnparsableQueryError,
    UnsafeQueryError,
)
from dbtools.plural import counted
from dbtools.safety import check_query

logger = logging.getLogger(__name__)
# Values that are text in JSON too: their str().
_TEXT_TYPES = (datetime.date, datetime.datetime, datetime.time, datetime.timedelta, uuid.UUID)
# Cells whose str() is their text (cell_text's own fallback), rendered without its checks.
_PLAIN_TEXT = {str, int, float, bool, type(None), decimal.Decimal, *_TEXT_TYPES}
# JSON scalars as they are (so are finite floats).
_JSON_NATIVE = {str, int, bool, type(None)}
# SQLite's storage classes, by the Python type its values arrive as.
_STORED_TYPES = {int: "integer", float: "real", str: "text", bytes: "blob"}


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str
    nullable: bool
    primary_key: bool
    comment: str | None = None


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableInfo:
    name: (
        str  # as written in SQL, unquoted: "customers", or "sales.orders" outside PostgreSQL's public schema
    )
    columns: tuple[ColumnInfo, ...]
    foreign_keys: tuple[ForeignKey, ...]
    create_sql: str  # SQLite: as stored; PostgreSQL: an equivalent rendered CREATE TABLE
    comment: str | None = None
    row_estimate: int | None = None

    def column(self, name: str) -> ColumnInfo:
        """The column called `name` (case-insensitive); UnknownObjectError naming the closest matches."""
        found = _lookup({c.name: c for c in self.columns}, name)
        if found is None:
            raise UnknownObjectError(
                f'no column "{name}" in table "{self.name}"'
                + closest_hint(name, [c.name for c in self.columns], "columns")
            )
        return found


@dataclass
class QueryResult:
    sql: str
    columns: list[str]
    rows: list[tuple]
    row_count: int
    truncated: bool
    elapsed_ms: float
    truncation: str | None = None  # why rows were left out, with a hint to narrow the query
    lines: list[str] = field(default_factory=list)  # each row as text (row_text)
    column_types: list[str | None] = field(default_factory=list)  # per column; None where unknown

    def to_dict(self) -> dict:
        """JSON-ready form: cells become JSON scalars (dates and decimals as text, bytes as hex)."""
        return {
            "sql": self.sql,
            "columns": list(self.columns),
            "column_types": list(self.column_types),
            "rows": _json_rows(self.rows),
            "row_count": self.row_count,
            "truncated": self.truncated,
            "truncation": self.truncation,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }


def _json_rows(rows: Sequence[tuple]) -> list[list]:
    """The rows with every cell a JSON scalar, converted a column at a time (most columns hold one type):
    columns whose cells already are JSON scalars are kept as they are."""
    columns = list(zip(*rows, strict=True))
    converted = [_json_column(column) for column in columns]
    if all(column is None for column in converted):
        return [list(row) for row in rows]
    return [
        list(row)
        for row in zip(
            *(old if new is None else new for old, new in zip(columns, converted, strict=True)), strict=True
        )
    ]


def _json_column(column: Sequence[object]) -> list | None:
    """A column's cells as JSON scalars; None when they already are."""
    kinds = set(map(type, column))
    if float not in kinds:
        if kinds <= _JSON_NATIVE:
            return None
    elif kinds <= _JSON_NATIVE | {float} and all(math.isfinite(v) for v in column if type(v) is float):
        return None
    others = kinds - {type(None)}
    convert = _JSON_BY_TYPE.get(others.pop()) if len(others) == 1 else None
    if convert is not None:  # one type besides NULL, as a typed engine gives: no checks per cell
        return [None if v is None else convert(v) for v in column]
    return [_json_cell(v) for v in column]


def _json_decimal(value: decimal.Decimal) -> object:
    if not value.is_finite():
        return str(value)
    return int(value) if value == value.to_integral_value() else float(value)


def _json_cell(value: object) -> object:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN or Infinity
    if isinstance(value, decimal.Decimal):
        return _json_decimal(value)
    return cell_text(value)


# Types whose JSON form one function gives.
_JSON_BY_TYPE = {decimal.Decimal: _json_decimal, **dict.fromkeys(_TEXT_TYPES, str)}


def _stored_type(rows: Sequence[tuple], column: int) -> str | None:
    """A column's type as its first non-NULL value shows it, for engines whose results carry no types."""
    value = next((row[column] for row in rows if row[column] is not None), None)
    return None if value is None else _STORED_TYPES.get(type(value), type(value).__name__)


def row_text(row: Sequence[object]) -> str:
    """A row as the tools print it: its cells' text joined by " | "."""
    # str() already is the text of most cells (None included); only the rest take cell_text's checks.
    return " | ".join([str(v) if type(v) in _PLAIN_TEXT else cell_text(v) for v in row])


def cell_text(value: object) -> str:
    """A cell as the tools print it: NULL as None, bytes as hex, JSON and arrays as JSON, else str()."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _lookup(by_name: dict, name: str) -> object | None:
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


@dataclass
class ResultCaps:
    """Collects a result's rows up to the row cap and the character cap, and says why it stopped."""

    max_rows: int
    max_chars: int
    collected: list[tuple] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # each kept row as text, rendered once
    chars: int = 0
    truncation: str | None = None
    clipped: bool = False  # the first row alone was over the character cap and its long values were cut

    def add_rows(self, rows: Sequence[tuple]) -> bool:
        """add() each of `rows` in turn, False once the result must stop; rows well within both caps are kept
        without add()'s checks one by one."""
        room = self.max_rows - len(self.collected)
        collected, lines, budget = self.collected, self.lines, self.max_chars - 1
        for row in rows[:room] if len(rows) > room else rows:
            line = " | ".join([str(v) if type(v) in _PLAIN_TEXT else cell_text(v) for v in row])
            if self.chars + len(line) > budget:
                if not self.add(row):  # the character cap, or a first row over it alone, in add()'s words
                    return False
                continue
            collected.append(row)
            lines.append(line)
            self.chars += len(line) + 1
        return len(rows) <= room or self.add(rows[room])

    def add(self, row: tuple) -> bool:
        """Keep `row` if it fits under the caps; False once the result must stop here."""
        if len(self.collected) >= self.max_rows:
            self.truncation = (
                f"stopped at {counted(self.max_rows, 'row')} (row cap); "
                "add a LIMIT or a narrower WHERE to see the rest"
            )
            return False
        # Values are capped by the engines (SQLite's length limit, PostgreSQL's cut in the query), so rendering
        # a row before knowing that it fits costs at most one such value.
        line = row_text(row)
        if self.collected and self.chars + len(line) + 1 > self.max_chars:
            cut = "; long values of the first row were cut to fit" if self.clipped else ""
            self.truncation = (
                f"stopped after {counted(len(self.collected), 'row')} "
                f"at the {self.max_chars}-character cap{cut}; "
                "select fewer or shorter columns, or add a LIMIT"
            )
            return False
        if len(line) + 1 > self.max_chars:
            # The first row alone: keep it, but never let one huge value through whole.
            separators = 3 * max(len(row) - 1, 0) + 1
            row = _clip_row(row, max(self.max_chars - separators, 0))
            line = row_text(row)
            self.clipped = True
            self.truncation = (
                f"the first row alone was over the {self.max_chars}-character cap, so its long values were cut; "
                "select shorter columns, e.g. substr(column, 1, 200)"
            )
        self.collected.append(row)
        self.lines.append(line)
        self.chars += len(line) + 1
        return True


def _cell_size(value: object) -> int:
    """len(cell_text(value)), without building the text of a large blob."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 2 + 2 * len(value)
    return len(value) if isinstance(value, str) else len(cell_text(value))


def _clip_row(row: tuple, budget: int) -> tuple:
    """The row with its longest values cut to one common length, so that the row fits in `budget` characters."""
    sizes = sorted(_cell_size(v) for v in row)
    remaining = budget
    for i, size in enumerate(sizes):
        share = remaining // (len(sizes) - i)
        if size > share:
            return tuple(_clip(v, share) for v in row)
        remaining -= size
    return row


def _clip(value: object, limit: int) -> object:
    if _cell_size(value) <= limit:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)[: max(limit - 2, 0) // 2]
    return (value if isinstance(value, str) else cell_text(value))[:limit]


class Database(ABC):
    """A read-only database. Thread-safe: every call may come from a different thread."""

    dialect: str  # sqlglot dialect: "sqlite" | "postgres" | "mysql" | "duckdb"
    placeholder: str  # parameter marker for stream(): "?" (SQLite, DuckDB) or "%s" (PostgreSQL, MySQL)
    # Whether TableInfo.create_sql already shows the table's and columns' comments (MySQL's COMMENT clauses).
    create_sql_has_comments = False
    # Seconds a schema check is reused: 0 checks at every call; an engine whose check reads big catalogs reuses
    # it, so a schema change shows within that time.
    schema_check_interval_s = 0.0

    def __init__(self, display_name: str, *, timeout_s: float, max_rows: int, max_chars: int) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0) or max_rows < 1 or max_chars < 1:
            raise ValueError("timeout_s, max_rows and max_chars must be positive")
        self.display_name = display_name
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_chars = max_chars
        self._catalog_lock = threading.Lock()
        self._catalog: dict[str, TableInfo] | None = None
        self._catalog_marker: object = None
        self._catalog_generation = 0  # how many times the catalog was loaded
        self._schema_check: tuple[object, float] | None = None  # the last schema marker and when it was read
        self._counts: dict[str, tuple[object, int]] = {}  # table -> (data marker, row count)
        self._table_parts: dict[str, tuple[str, ...]] = {}  # table name -> its SQL name parts, filled on load

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
                declared or _stored_type(caps.collected, i) for i, (_, declared) in enumerate(described)
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
        if re.match(r"\s*explain\b", sql, re.IGNORECASE):
            raise UnsafeQueryError("send the query without EXPLAIN: the plan is asked for without running it")
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
        found = _lookup(by_name, cleaned)
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

"""DuckDB engine: a .duckdb file, or CSV/Parquet/JSON files as views, attached read-only to an in-memory instance
whose file access is limited to those files and whose configuration is locked; DuckDB's own parser must read
every query as one SELECT, and interrupt() stops it at its timeout. With hidden columns, queries run in the
instance's own catalog, where a view of each attached table (of the same name) reads NULL in their place."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
from sqlglot import exp

from dbtools.engines.catalog import ColumnInfo, ForeignKey, TableInfo
from dbtools.engines.database import Database
from dbtools.engines.dsn import DUCKDB_SUFFIXES
from dbtools.engines.duckdb_files import data_files, view_names, write_views_catalog
from dbtools.engines.result_caps import ResultCaps
from dbtools.errors import ConnectionFailedError, QueryError, QueryTimeoutError, UnsafeQueryError, first_line
from dbtools.query_limits import DEFAULT_QUERY_LIMITS, QueryLimits

# Names DuckDB keeps for its own catalogs.
_RESERVED_CATALOGS = {"memory", "system", "temp", "main"}
_TABLES_SQL = """
SELECT * FROM (
    SELECT schema_name, table_name AS name, sql, comment, estimated_size, false AS is_view, table_oid AS oid
    FROM duckdb_tables() WHERE database_name = current_database()
    UNION ALL
    SELECT schema_name, view_name, sql, comment, NULL, true, view_oid
    FROM duckdb_views() WHERE database_name = current_database() AND NOT internal
) ORDER BY schema_name <> 'main', schema_name, oid
"""
_COLUMNS_SQL = """
SELECT schema_name, table_name, column_name, data_type, is_nullable, comment FROM duckdb_columns()
WHERE database_name = current_database() ORDER BY schema_name, table_name, column_index
"""
_KEYS_SQL = """
SELECT schema_name, table_name, constraint_type, constraint_column_names, referenced_table, referenced_column_names
FROM duckdb_constraints()
WHERE database_name = current_database() AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY')
ORDER BY constraint_index
"""


class DuckDBDatabase(Database):
    """A DuckDB database file, or data files as one view each; safe for many threads (a cursor per call)."""

    dialect = "duckdb"
    placeholder = "?"

    def __init__(self, target: str | Path, *, limits: QueryLimits = DEFAULT_QUERY_LIMITS) -> None:
        self.path = Path(target).expanduser().resolve()
        super().__init__(str(target), limits=limits)
        self._scratch: Path | None = None
        if self.path.name.lower().endswith(DUCKDB_SUFFIXES):
            if not self.path.is_file():
                raise ConnectionFailedError(f"no DuckDB database at {self.path}: check the path in --dsn")
            catalog, self.files = self.path, [self.path]
            alias = self.path.stem if self.path.stem.lower() not in _RESERVED_CATALOGS else "data"
        else:
            self.files = data_files(self.path)
            self._scratch = Path(tempfile.mkdtemp(prefix="sqlscout-duckdb-"))
            catalog, alias = self._scratch / "views.duckdb", "data"
            try:
                write_views_catalog(catalog, view_names(self.files))
            except BaseException:
                shutil.rmtree(self._scratch, ignore_errors=True)
                raise
        self._lock = threading.Lock()
        self._alias = alias
        self._use_catalog = f"USE {_quote(alias)}"
        try:
            self._conn = _locked_instance(catalog, alias, self.files)
        except duckdb.Error as exc:
            self.close()
            raise ConnectionFailedError(f"cannot open {self.path} with DuckDB: {first_line(exc)}") from None
        if self._scratch is not None:
            # DuckDB keeps the attached file open: its folder can go now, so that a process that ends without
            # closing (killed, or leaving a question running) leaves nothing behind. Where an open file cannot be
            # deleted (Windows), close() tries again.
            shutil.rmtree(self._scratch, ignore_errors=True)

    @contextmanager
    def _cursor(self, timeout_s: float) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of its own for one call (no state carries over) in the attached database's catalog,
        interrupted at the timeout."""
        with self._lock:
            cursor = self._conn.cursor()
        timer = threading.Timer(timeout_s, cursor.interrupt)
        timer.daemon = True
        started = time.perf_counter()
        try:
            cursor.execute(self._use_catalog)
            timer.start()
            yield cursor
        except duckdb.InterruptException:
            raise QueryTimeoutError(time.perf_counter() - started, timeout_s) from None
        except duckdb.Error as exc:
            raise QueryError(str(exc).strip()) from None
        finally:
            timer.cancel()
            cursor.close()

    @staticmethod
    def _check_select(cursor: duckdb.DuckDBPyConnection, sql: str) -> None:
        """DuckDB's own parser must read `sql` as exactly one SELECT: the files it may read, it may also write
        (COPY ... TO), so the engine refuses every other statement itself."""
        statements = cursor.extract_statements(sql)
        if len(statements) != 1:
            raise UnsafeQueryError(f"only one statement per call is allowed; DuckDB reads {len(statements)}")
        kind = statements[0].type
        if kind != duckdb.StatementType.SELECT:
            raise UnsafeQueryError(
                f"only read-only queries are allowed; DuckDB reads this as a {kind.name} statement"
            )

    def _run_capped(self, sql: str, caps: ResultCaps, timeout_s: float) -> list[tuple[str, str | None]]:
        with self._cursor(timeout_s) as cursor:
            self._check_select(cursor, sql)
            cursor.execute(sql)
            # A column of NULL literals has DuckDB's type "NULL", which says no more than no type.
            columns = [(d[0], None if str(d[1]) == '"NULL"' else str(d[1])) for d in cursor.description or ()]
            while batch := cursor.fetchmany(256):
                if not caps.add_rows(batch):
                    break
            return columns

    def result_name(self, text: str) -> str | None:
        # DuckDB names such a column by its own rendering of the parsed expression: parsed here, never bound.
        try:
            with self._cursor(self.timeout_s) as cursor:
                sql = "SELECT json_deserialize_sql(json_serialize_sql(?))"
                [(rendered,)] = cursor.execute(sql, ["SELECT " + text]).fetchall()
        except QueryError:
            return None
        return rendered.removeprefix("SELECT ") if rendered.startswith("SELECT ") else None

    def _plan(self, sql: str, timeout_s: float) -> str:
        with self._cursor(timeout_s) as cursor:
            self._check_select(cursor, sql)
            rows = cursor.execute("EXPLAIN " + sql).fetchall()
        return "\n".join(line.rstrip() for _, plan in rows for line in plan.splitlines())

    def _compile_error(self, sql: str) -> str | None:
        with self._cursor(self.timeout_s) as cursor:
            try:
                self._check_select(cursor, sql)
                cursor.execute("EXPLAIN " + sql)  # binds the query without running it
            except UnsafeQueryError:
                return None
            except duckdb.Error as exc:
                return str(exc).strip()
        return None

    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        with self._cursor(timeout_s or self.timeout_s) as cursor:
            cursor.execute(sql, list(params) if params else None)
            while batch := cursor.fetchmany(512):
                yield from batch

    def table_reference(self, name: str) -> exp.Table:
        self.tables()
        parts = self._table_parts[name]
        schema, table = ("main", *parts) if len(parts) == 1 else parts
        return exp.table_(
            exp.to_identifier(table, quoted=True),
            db=exp.to_identifier(schema, quoted=True),
            catalog=exp.to_identifier(self._alias, quoted=True),
        )

    def _catalog_rows(self, sql: str) -> list[tuple]:
        """Rows of a query of the attached database's own catalog."""
        with self._cursor(max(self.timeout_s, 30.0)) as cursor:
            return cursor.execute(sql).fetchall()

    def _schema_marker(self) -> object:
        return self._data_marker()

    def _data_marker(self) -> tuple[str, ...]:
        # Views read their files on every query; a database file attached read-only changes only when replaced.
        return tuple(f"{s.st_size}.{s.st_mtime_ns}" for s in (os.stat(f) for f in self.files if f.exists()))

    def _load_tables(self) -> list[TableInfo]:
        columns: dict[tuple[str, str], list[tuple]] = {}
        for schema, table, *column in self._catalog_rows(_COLUMNS_SQL):
            columns.setdefault((schema, table), []).append(tuple(column))
        primary: dict[tuple[str, str], tuple[str, ...]] = {}
        foreign: dict[tuple[str, str], list[ForeignKey]] = {}
        for schema, table, kind, cols, ref_table, ref_cols in self._catalog_rows(_KEYS_SQL):
            if kind == "PRIMARY KEY":
                primary[(schema, table)] = tuple(cols)
            else:
                ref = ref_table if schema == "main" else f"{schema}.{ref_table}"
                foreign.setdefault((schema, table), []).append(ForeignKey(tuple(cols), ref, tuple(ref_cols)))
        tables = []
        parts: dict[str, tuple[str, ...]] = {}
        for schema, table, sql, comment, size, is_view, _oid in self._catalog_rows(_TABLES_SQL):
            key = (schema, table)
            name = table if schema == "main" else f"{schema}.{table}"
            parts[name] = (table,) if schema == "main" else (schema, table)
            infos = tuple(
                ColumnInfo(
                    name=col,
                    type=col_type,
                    nullable=nullable and col not in primary.get(key, ()),
                    primary_key=col in primary.get(key, ()),
                    comment=note,
                )
                for col, col_type, nullable, note in columns.get(key, [])
            )
            if is_view and self._scratch is not None:
                # A file's view: what the model needs is its columns, not the path it reads.
                columns_sql = ", ".join(f"{_quote_if_needed(c.name)} {c.type}" for c in infos)
                create_sql = f"CREATE TABLE {'.'.join(map(_quote_if_needed, parts[name]))} ({columns_sql})"
            else:
                create_sql = (sql or "").strip().rstrip(";")
            tables.append(
                TableInfo(
                    name=name,
                    columns=infos,
                    foreign_keys=tuple(foreign.get(key, [])),
                    create_sql=create_sql,
                    comment=comment,
                    row_estimate=None if is_view else size,
                )
            )
        self._table_parts = parts
        return tables

    def fingerprint(self, table: str) -> str:
        info = self.table(table)
        return ":".join([str(info.row_estimate), *self._data_marker()])

    def close(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _locked_instance(catalog: Path, alias: str, files: list[Path]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with `catalog` attached read-only as its default database, reading only `files`, with
    external access off, no extensions installed or loaded on demand, plans that do not depend on the data's
    statistics, and its configuration locked."""
    conn = duckdb.connect(
        ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    try:
        conn.execute(f"ATTACH {_literal(str(catalog))} AS {_quote(alias)} (READ_ONLY)")
        conn.execute(f"USE {_quote(alias)}")
        # Allowed paths can only be set on a running instance, before external access is switched off.
        conn.execute(f"SET allowed_paths = [{', '.join(_literal(str(f)) for f in files)}]")
        conn.execute("SET enable_external_access = false")
        # Statistics propagation prunes a plan by each column's minimum and maximum over all rows: a plan of a
        # query under row filters would then tell a filtered-out row's value (EMPTY_RESULT past it).
        conn.execute("SET disabled_optimizers = 'statistics_propagation'")
        conn.execute("SET lock_configuration = true")
    except BaseException:
        conn.close()
        raise
    return conn


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_if_needed(name: str) -> str:
    """A name bare when it is a plain lower-case word, else quoted: the CREATE TABLE text shown for a file."""
    return name if name.isidentifier() and name.islower() and name.isascii() else _quote(name)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"

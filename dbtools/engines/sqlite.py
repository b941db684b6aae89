"""SQLite engine: a read-only URI, PRAGMA query_only, an authorizer and a progress-handler timeout per call."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from urllib.parse import quote as url_quote

from dbtools.access.functions import allowed_functions
from dbtools.engines.catalog import ColumnInfo, ForeignKey, TableInfo
from dbtools.engines.database import Database
from dbtools.engines.result_caps import ResultCaps
from dbtools.engines.sqlite_connections import IdleConnections
from dbtools.engines.sqlite_printf import install_printf_guard, take_printf_refusal
from dbtools.errors import ConnectionFailedError, QueryError, QueryTimeoutError
from dbtools.query_limits import DEFAULT_QUERY_LIMITS, QueryLimits

# What a user query may do, as SQLite's authorizer sees it; everything else is denied at compile time.
_ALLOWED_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_RECURSIVE,
}
# Read-only pragmas a query may call as table-valued functions, e.g. SELECT * FROM pragma_table_info('t');
# their argument is a table or index name.
_NAME_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
# Pragmas that only read when given no value.
_VALUE_PRAGMAS = {"schema_version", "data_version"}
# VM instructions between deadline checks: about 0.2 ms of work apart, while each check costs a Python call.
_PROGRESS_STEPS = 10_000
# The deadline is checked between VM instructions, never inside one function call: zeroblob(), randomblob() or
# replace() would build a gigabyte within one. Capping a value's size makes them fail at once (printf() needs
# its own guard, see sqlite_printf).
MAX_VALUE_BYTES = 32 * 1024 * 1024
DATABASE_SUFFIXES = (".sqlite", ".sqlite3", ".db", ".db3")


def _authorize(
    action: int,
    arg1: str | None,
    arg2: str | None,
    db_name: str | None,
    source: str | None,
) -> int:
    """SQLite's compile-time check of every statement: reads only, on top of the read-only connection, and only
    the functions on the allow list."""
    if action in _ALLOWED_ACTIONS:
        if action == sqlite3.SQLITE_FUNCTION and arg2 and arg2.lower() not in allowed_functions("sqlite"):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        pragma = (arg1 or "").lower()
        if pragma in _NAME_PRAGMAS or (pragma in _VALUE_PRAGMAS and arg2 is None):
            return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
        # Asked when a table-valued function (json_each, pragma_table_info) is set up; no write follows,
        # and the connection is read-only anyway.
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class SQLiteDatabase(Database):
    """A SQLite file opened read-only; one connection per call, so any thread may call."""

    dialect = "sqlite"
    placeholder = "?"

    def __init__(self, path: str | Path, *, limits: QueryLimits = DEFAULT_QUERY_LIMITS) -> None:
        self.path = Path(path).expanduser().resolve()
        super().__init__(str(path), limits=limits)
        if self.path.is_dir():
            raise ConnectionFailedError(
                f"{self.path} is a folder, not a SQLite database: give the database file's path in --dsn"
                + _database_files_hint(self.path)
            )
        if not self.path.is_file():
            raise ConnectionFailedError(f"no SQLite database at {self.path}: check the path in --dsn")
        self._uri = f"file:{url_quote(str(self.path))}?mode=ro"
        self._connections = IdleConnections(self.path, partial(self._open_connection, False))
        self._user_connections = IdleConnections(self.path, partial(self._open_connection, True))
        with self._connect() as conn:
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.DatabaseError as exc:
                if str(exc).startswith("database is locked"):
                    raise ConnectionFailedError(
                        f"cannot open {self.path}: another process is writing to it; retry when it has finished"
                    ) from None
                raise ConnectionFailedError(f"cannot read {self.path} as a SQLite database: {exc}") from None

    @contextmanager
    def _connect(
        self, *, timeout_s: float | None = None, user_query: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """A read-only connection, reused across calls, with the deadline when given; a user's query gets one
        with the cap on a value's size and the printf() guard."""
        connections = self._user_connections if user_query else self._connections
        conn, opened_on = connections.take()
        try:
            if timeout_s is not None:
                deadline = time.perf_counter() + timeout_s
                conn.set_progress_handler(lambda: int(time.perf_counter() > deadline), _PROGRESS_STEPS)
            yield conn
        finally:
            conn.set_progress_handler(None, 0)
            connections.give_back(conn, opened_on)

    def _open_connection(self, user_query: bool) -> sqlite3.Connection:
        """A new read-only connection: query_only and the authorizer; for a user's query the value cap and the
        printf() guard."""
        try:
            # A writer's lock is waited for no longer than a call's timeout.
            conn = sqlite3.connect(
                self._uri, uri=True, check_same_thread=False, isolation_level=None, timeout=self.timeout_s
            )
        except sqlite3.Error as exc:
            raise ConnectionFailedError(f"cannot open {self.path} read-only: {exc}") from None
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_authorize)
        if user_query and hasattr(conn, "setlimit"):  # Python 3.11+; 3.10 has no way to set it
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        if user_query:
            install_printf_guard(conn, MAX_VALUE_BYTES)
        return conn

    @contextmanager
    def _errors(self, timeout_s: float) -> Iterator[None]:
        """Turn sqlite3 errors into the layer's errors; an interrupt past the deadline is a timeout."""
        started = time.perf_counter()
        try:
            yield
        except sqlite3.OperationalError as exc:
            elapsed = time.perf_counter() - started
            if str(exc) == "interrupted":  # only the deadline handler interrupts
                raise QueryTimeoutError(elapsed, timeout_s) from None
            refusal = take_printf_refusal()
            if refusal:
                raise QueryError(refusal) from None
            if str(exc).startswith("database is locked"):
                raise QueryError(
                    f"{exc}: another process is writing to {self.path.name}; retry when it has finished"
                ) from None
            raise QueryError(str(exc)) from None
        except sqlite3.DataError as exc:
            raise QueryError(
                f"{exc}: a query's values are limited to {MAX_VALUE_BYTES // 2**20} MiB each; "
                "select length(column) or a smaller part instead"
            ) from None
        except sqlite3.Error as exc:
            raise QueryError(str(exc)) from None

    def _run_capped(self, sql: str, caps: ResultCaps, timeout_s: float) -> list[tuple[str, str | None]]:
        with self._connect(timeout_s=timeout_s, user_query=True) as conn, self._errors(timeout_s):
            # Closing the cursor ends a statement stopped at a cap, so the connection goes back without it.
            with closing(conn.execute(sql)) as cursor:
                columns = [(d[0], None) for d in cursor.description or ()]  # SQLite types values, not columns
                while True:
                    batch = cursor.fetchmany(256)
                    if not batch or not caps.add_rows(batch):
                        break
            return columns

    def _plan(self, sql: str, timeout_s: float) -> str:
        with self._connect(timeout_s=timeout_s, user_query=True) as conn, self._errors(timeout_s):
            steps = conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        depth = {0: -1}
        lines = []
        for step, parent, _unused, detail in steps:
            depth[step] = depth.get(parent, -1) + 1
            lines.append("  " * depth[step] + detail)
        return "\n".join(lines)

    def _compile_error(self, sql: str) -> str | None:
        # EXPLAIN compiles the statement into bytecode without running it.
        with self._connect(timeout_s=self.timeout_s, user_query=True) as conn:
            try:
                conn.execute("EXPLAIN " + sql).fetchone()
            except sqlite3.Error as exc:
                return str(exc)
        return None

    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        timeout = timeout_s or self.timeout_s
        with self._connect(timeout_s=timeout) as conn, self._errors(timeout):
            with closing(conn.execute(sql, tuple(params))) as cursor:
                while batch := cursor.fetchmany(512):
                    yield from batch

    def _schema_marker(self) -> object:
        with self._connect() as conn, self._errors(self.timeout_s):
            return conn.execute("PRAGMA schema_version").fetchone()[0]

    def _load_tables(self) -> list[TableInfo]:
        catalog_timeout = max(self.timeout_s, 30.0)
        with self._connect(timeout_s=catalog_timeout) as conn, self._errors(catalog_timeout):
            entries = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
            ).fetchall()
            estimates = self._row_estimates(conn)
            tables = []
            for name, create_sql in entries:
                columns = conn.execute(
                    'SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid', (name,)
                ).fetchall()
                fk_rows = conn.execute(
                    'SELECT id, "table", "from", "to" FROM pragma_foreign_key_list(?) ORDER BY id DESC, seq',
                    (name,),
                ).fetchall()
                tables.append(
                    TableInfo(
                        name=name,
                        columns=tuple(
                            ColumnInfo(
                                name=c, type=t or "", nullable=not (notnull or pk), primary_key=bool(pk)
                            )
                            for c, t, notnull, pk in columns
                        ),
                        foreign_keys=_group_foreign_keys(conn, fk_rows),
                        create_sql=create_sql or "",
                        row_estimate=estimates.get(name),
                    )
                )
            self._table_parts = {t.name: (t.name,) for t in tables}
            return tables

    @staticmethod
    def _row_estimates(conn: sqlite3.Connection) -> dict[str, int]:
        """Row counts ANALYZE recorded, where it ran (counting every table would scan the whole file)."""
        try:
            rows = conn.execute("SELECT tbl, stat FROM sqlite_stat1").fetchall()
        except sqlite3.OperationalError:
            return {}
        estimates: dict[str, int] = {}
        for table, stat in rows:
            head = (stat or "").split(" ", 1)[0]
            if head.isdigit():
                estimates.setdefault(table, int(head))
        return estimates

    def fingerprint(self, table: str) -> str:
        info = self.table(table)
        quoted = self.quote(info.name)
        with self._connect(timeout_s=self.timeout_s) as conn, self._errors(self.timeout_s):
            try:
                count, last = conn.execute(f"SELECT count(*), max(rowid) FROM {quoted}").fetchone()
            except sqlite3.OperationalError:
                count, last = conn.execute(f"SELECT count(*), NULL FROM {quoted}").fetchone()  # WITHOUT ROWID
        return ":".join([str(count), str(last), *self._data_marker()])

    def _data_marker(self) -> tuple[str, ...]:
        # Updates change neither count nor rowid; the files' sizes and times do (WAL writes land in -wal).
        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return tuple(f"{s.st_size}.{s.st_mtime_ns}" for s in (os.stat(f) for f in files if f.exists()))

    def close(self) -> None:
        self._connections.close()
        self._user_connections.close()


def _database_files_hint(folder: Path) -> str:
    """The likely database files directly in `folder`, as a hint to append to a message."""
    found = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in DATABASE_SUFFIXES and p.is_file())
    if not found:
        return ""
    return " (it holds " + ", ".join(found[:3]) + (", ..." if len(found) > 3 else "") + ")"


def _group_foreign_keys(conn: sqlite3.Connection, fk_rows: list[tuple]) -> tuple[ForeignKey, ...]:
    # SQLite numbers foreign keys in reverse declaration order; rows arrive sorted back into declaration order.
    grouped: dict[int, tuple[str, list[str], list[str | None]]] = {}
    for fk_id, ref_table, column, ref_column in fk_rows:
        entry = grouped.setdefault(fk_id, (ref_table, [], []))
        entry[1].append(column)
        entry[2].append(ref_column)
    keys = []
    for ref_table, columns, ref_columns in grouped.values():
        if any(c is None for c in ref_columns):
            # REFERENCES t without a column list points at t's primary key.
            pk = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", (ref_table,)
                )
            ]
            ref_columns = pk if len(pk) == len(columns) else [c or "rowid" for c in ref_columns]
        keys.append(ForeignKey(tuple(columns), ref_table, tuple(ref_columns)))
    return tuple(keys)

"""MySQL and MariaDB engine: pooled connections; every call one READ ONLY transaction, rolled back, under the
server's statement time limit and a KILL QUERY at the timeout, its session wiped before the connection is reused."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pymysql
from pymysql.constants import FIELD_TYPE
from pymysql.cursors import SSCursor

from dbtools.connection_defaults import CONNECT_TIMEOUT_S, POOL_SIZE
from dbtools.engines.catalog import ColumnInfo, ForeignKey, TableInfo
from dbtools.engines.database import Database
from dbtools.engines.mariadb_dialect import MariaDB
from dbtools.engines.mysql_grants import privileges_beyond_select
from dbtools.engines.mysql_pool import (
    LOST_CONNECTION_CODES,
    KillTimer,
    MySQLConnection,
    MySQLPool,
    connect_args,
    error_text,
)
from dbtools.engines.result_caps import ResultCaps
from dbtools.errors import ConnectionFailedError, QueryError, QueryTimeoutError
from dbtools.query_limits import DEFAULT_QUERY_LIMITS, QueryLimits

logger = logging.getLogger(__name__)

# Set on every call: the allowlist reads quotes and backslashes as this mode does (no ANSI_QUOTES, no
# NO_BACKSLASH_ESCAPES), and GROUP BY stays as lenient as SQLite's, which the model writes.
SQL_MODE = "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
# The client's KILL QUERY follows the server's own limit by this much, as a backstop for statements the server's
# limit does not cover (MySQL's max_execution_time covers SELECT only) or does not stop.
KILL_GRACE_S = 0.25
# The call's own timeout, set on the session as MariaDB's max_statement_time or MySQL's max_execution_time.
_STATEMENT_LIMIT_CODES = frozenset({1969, 3024})
# KILL QUERY: this layer's KillTimer, or someone else's.
_KILLED_CODE = 1317
_CANNOT_CONNECT_CODES = frozenset({2002, 2003})
# InnoDB's row count in the catalog is an estimate; counting a big table scans it, so past this size the
# estimate is shown instead.
ESTIMATE_ABOVE_ROWS = 100_000
_TYPE_NAMES = {
    FIELD_TYPE.DECIMAL: "decimal",
    FIELD_TYPE.NEWDECIMAL: "decimal",
    FIELD_TYPE.TINY: "tinyint",
    FIELD_TYPE.SHORT: "smallint",
    FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int",
    FIELD_TYPE.LONGLONG: "bigint",
    FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double",
    FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.DATE: "date",
    FIELD_TYPE.TIME: "time",
    FIELD_TYPE.DATETIME: "datetime",
    FIELD_TYPE.YEAR: "year",
    FIELD_TYPE.VARCHAR: "varchar",
    FIELD_TYPE.VAR_STRING: "varchar",
    FIELD_TYPE.STRING: "char",
    FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.JSON: "json",
    FIELD_TYPE.ENUM: "enum",
    FIELD_TYPE.SET: "set",
    FIELD_TYPE.GEOMETRY: "geometry",
}  # text and blob share their codes: the values' own types tell them apart
_TABLES_SQL = """
SELECT TABLE_NAME, TABLE_TYPE, TABLE_COMMENT, TABLE_ROWS FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME
"""
_COLUMNS_SQL = """
SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY, COLUMN_COMMENT
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, ORDINAL_POSITION
"""
_FOREIGN_KEYS_SQL = """
SELECT TABLE_NAME, CONSTRAINT_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME,
       REFERENCED_COLUMN_NAME
FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA = DATABASE() AND REFERENCED_TABLE_NAME IS NOT NULL
ORDER BY TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION
"""
# Any DDL or comment change shows in one of these sums; the catalog tables are read from the data dictionary, not
# from the tables themselves.
_SCHEMA_MARKER_SQL = """
SELECT (SELECT CONCAT(COUNT(*), '.', SUM(CRC32(CONCAT_WS('|', TABLE_NAME, TABLE_TYPE, TABLE_COMMENT))))
        FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()),
       (SELECT CONCAT(COUNT(*), '.', SUM(CRC32(CONCAT_WS('|', TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE,
                                                         COLUMN_KEY, COLUMN_COMMENT, ORDINAL_POSITION))))
        FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()),
       (SELECT CONCAT(COUNT(*), '.', SUM(CRC32(CONCAT_WS('|', TABLE_NAME, CONSTRAINT_NAME, COLUMN_NAME,
                                                         REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME))))
        FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE())
"""
_FINGERPRINT_SQL = """
SELECT TABLE_ROWS, DATA_LENGTH, UPDATE_TIME, CREATE_TIME, AUTO_INCREMENT FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s
"""


# The longest column alias MySQL and MariaDB take.
MAX_ALIAS_CHARS = 256


class MySQLDatabase(Database):
    """A MySQL or MariaDB database behind a connection pool; safe for many threads at once."""

    dialect = "mysql"
    placeholder = "%s"
    result_names_keep_comments = False
    create_sql_has_comments = True  # SHOW CREATE TABLE writes them as COMMENT clauses
    # MariaDB reads every table's definition to answer the catalog views (about 25 ms for 150 tables).
    schema_check_interval_s = 2.0

    def __init__(
        self,
        url: str,
        display_name: str,
        *,
        limits: QueryLimits = DEFAULT_QUERY_LIMITS,
        pool_size: int = POOL_SIZE,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
    ) -> None:
        super().__init__(display_name, limits=limits)
        args = connect_args(url, max(1, connect_timeout_s))
        try:
            first = MySQLConnection(**args)
        except pymysql.Error as exc:
            raise ConnectionFailedError(f"cannot connect to {display_name}: {error_text(exc)}") from None
        self.is_mariadb = "mariadb" in first.get_server_info().lower()
        self.database = args["database"]
        with first.cursor() as cursor:
            cursor.execute("SELECT @@lower_case_table_names")
            self.case_sensitive_tables = cursor.fetchone()[0] == 0
        flavour = "MariaDB" if self.is_mariadb else "MySQL"
        address = args.get("unix_socket") or f"{args['host']}:{args['port']}"
        self._warn_about_privileges(first, display_name)
        self._pool = MySQLPool(args, size=pool_size, server=f"{flavour} at {address}", first=first)

    @staticmethod
    def _warn_about_privileges(conn: MySQLConnection, display_name: str) -> None:
        try:
            with conn.cursor() as cursor:
                cursor.execute("SHOW GRANTS")
                extra = privileges_beyond_select([row[0] for row in cursor.fetchall()])
        except pymysql.Error as exc:
            logger.warning("could not read the privileges of the account on %s: %s", display_name, exc)
            return
        if extra:
            logger.warning(
                "connected to %s as an account with privileges beyond SELECT (%s): every call is read-only, but "
                "the account itself is the real boundary (FILE, for one, reads and writes the server's files); "
                "connect as an account granted SELECT only",
                display_name,
                ", ".join(extra),
            )

    def _start(self, timeout_s: float) -> Callable[[MySQLConnection], None]:
        """What runs on a connection before a call: the session's settings and a READ ONLY transaction.

        The session is read-only as well as the transaction: DDL commits the transaction it runs in before it
        starts, and a read-only session still refuses it.
        """
        if self.is_mariadb:
            session = f"SESSION tx_read_only = 1, SESSION max_statement_time = {timeout_s:.3f}"
        else:
            session = (
                f"SESSION transaction_read_only = 1, SESSION max_execution_time = {max(1, round(timeout_s * 1000))}"
                # The catalog's statistics are otherwise cached for a day, and fingerprints would miss changes.
                ", SESSION information_schema_stats_expiry = 0"
            )

        def start(conn: MySQLConnection) -> None:
            with conn.cursor() as cursor:
                cursor.execute(f"SET NAMES utf8mb4, SESSION sql_mode = '{SQL_MODE}', {session}")
                cursor.execute("START TRANSACTION READ ONLY")

        return start

    @contextmanager
    def _call(self, timeout_s: float) -> Iterator[MySQLConnection]:
        """A pooled connection in a fresh READ ONLY transaction, watched by a KillTimer; errors become the
        layer's. A connection is waited for up to the call's own timeout: the calls holding them end by theirs."""
        watch: KillTimer | None = None
        try:
            with self._pool.connection(timeout_s, self._start(timeout_s)) as conn:
                watch = KillTimer(self._pool, conn, timeout_s + KILL_GRACE_S)
                try:
                    yield conn
                finally:
                    elapsed = watch.stop()
                # MariaDB's limit can end BENCHMARK() and the like early with a made-up value instead of an error.
                if watch.fired or elapsed >= timeout_s:
                    raise QueryTimeoutError(elapsed, timeout_s)
        except pymysql.Error as exc:
            code = exc.args[0] if exc.args else None
            if watch is not None and (watch.fired or code in _STATEMENT_LIMIT_CODES or code == _KILLED_CODE):
                elapsed = time.perf_counter() - watch.started
                # The server's clock may end the statement a moment before ours: its limit is still the timeout.
                if watch.fired or code in _STATEMENT_LIMIT_CODES or elapsed >= timeout_s:
                    raise QueryTimeoutError(max(elapsed, timeout_s), timeout_s) from None
                raise QueryError(f"cancelled on the server before the timeout: {error_text(exc)}") from None
            if code in LOST_CONNECTION_CODES or code in _CANNOT_CONNECT_CODES:
                raise ConnectionFailedError(
                    f"lost the connection to {self._pool.server} ({error_text(exc)}); the next call reconnects"
                ) from None
            raise QueryError(error_text(exc)) from None

    def _run_capped(self, sql: str, caps: ResultCaps, timeout_s: float) -> list[tuple[str, str | None]]:
        with self._call(timeout_s) as conn:
            cursor = conn.cursor(SSCursor)
            cursor.execute(sql)
            columns = [(d[0], _TYPE_NAMES.get(d[1])) for d in cursor.description or ()]
            while batch := cursor.fetchmany(256):
                if not caps.add_rows(batch):
                    # Reading the rest to reuse the connection could take long: it is closed instead.
                    conn.drop_unread_result()
                    break
            cursor.close()
            return columns

    @property
    def written_dialect(self):
        return MariaDB if self.is_mariadb else self.dialect

    def result_name(self, text: str) -> str | None:
        return text[:MAX_ALIAS_CHARS]

    def _plan(self, sql: str, timeout_s: float) -> str:
        with self._call(timeout_s) as conn, conn.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql)
            header = [d[0] for d in cursor.description]
            lines = [" | ".join(header)]
            lines += [" | ".join("" if v is None else str(v) for v in row) for row in cursor.fetchall()]
        return "\n".join(lines)

    def _compile_error(self, sql: str) -> str | None:
        # PREPARE parses and resolves the statement without running it; the session reset forgets it.
        with self._call(self.timeout_s) as conn, conn.cursor() as cursor:
            try:
                cursor.execute("PREPARE sqlscout_check FROM %s", (sql,))
            except pymysql.Error as exc:
                return error_text(exc)
        return None

    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        with self._call(timeout_s or self.timeout_s) as conn:
            cursor = conn.cursor(SSCursor)
            exhausted = False
            try:
                cursor.execute(sql, tuple(params) if params else None)
                while batch := cursor.fetchmany(512):
                    yield from batch
                exhausted = True
            finally:
                if not exhausted:
                    conn.drop_unread_result()
                cursor.close()

    def _catalog_timeout(self) -> float:
        return max(self.timeout_s, 30.0)

    def _schema_marker(self) -> object:
        return list(self.stream(_SCHEMA_MARKER_SQL, timeout_s=self._catalog_timeout()))[0]

    def _load_tables(self) -> list[TableInfo]:
        with self._call(self._catalog_timeout()) as conn, conn.cursor() as cursor:
            cursor.execute(_TABLES_SQL)
            relations = cursor.fetchall()
            cursor.execute(_COLUMNS_SQL)
            columns: dict[str, list[tuple]] = {}
            for table, *column in cursor.fetchall():
                columns.setdefault(table, []).append(tuple(column))
            cursor.execute(_FOREIGN_KEYS_SQL)
            keys: dict[str, dict[str, list[tuple]]] = {}
            for table, constraint, *column in cursor.fetchall():
                keys.setdefault(table, {}).setdefault(constraint, []).append(tuple(column))
            tables = []
            for name, kind, comment, table_rows in relations:
                cursor.execute(f"SHOW CREATE {'VIEW' if kind == 'VIEW' else 'TABLE'} {self.quote(name)}")
                create_sql = cursor.fetchone()[1]
                tables.append(
                    TableInfo(
                        name=name,
                        columns=tuple(
                            ColumnInfo(
                                name=col,
                                type=col_type,
                                nullable=nullable == "YES",
                                primary_key=key == "PRI",
                                comment=note or None,
                            )
                            for col, col_type, nullable, key, note in columns.get(name, [])
                        ),
                        foreign_keys=self._foreign_keys(keys.get(name, {}), create_sql),
                        create_sql=create_sql,
                        comment=(comment or None) if kind != "VIEW" else None,  # a view's says "VIEW"
                        row_estimate=table_rows if (table_rows or 0) > ESTIMATE_ABOVE_ROWS else None,
                    )
                )
        self._table_parts = {t.name: (t.name,) for t in tables}
        return tables

    def _foreign_keys(self, constraints: dict[str, list[tuple]], create_sql: str) -> tuple[ForeignKey, ...]:
        """The table's foreign keys in the order its CREATE TABLE declares them."""

        def declared_at(constraint: str) -> int:
            position = create_sql.find(f"CONSTRAINT {self.quote(constraint)}")
            return position if position >= 0 else len(create_sql)

        keys = []
        for constraint in sorted(constraints, key=declared_at):
            parts = constraints[constraint]
            ref_schema, ref_table = parts[0][1], parts[0][2]
            keys.append(
                ForeignKey(
                    tuple(p[0] for p in parts),
                    ref_table if ref_schema == self.database else f"{ref_schema}.{ref_table}",
                    tuple(p[3] for p in parts),
                )
            )
        return tuple(keys)

    def _normalise_table_name(self, name: str) -> str:
        cleaned = super()._normalise_table_name(name)
        prefix = self.database.lower() + "."
        return cleaned[len(prefix) :] if cleaned.lower().startswith(prefix) else cleaned

    def fingerprint(self, table: str) -> str:
        info = self.table(table)
        rows = list(self.stream(_FINGERPRINT_SQL, (info.name,), timeout_s=self._catalog_timeout()))
        return ":".join(str(v) for v in rows[0]) if rows else ""

    def close(self) -> None:
        self._pool.close()

"""PostgreSQL engine: a connection pool; every call is one READ ONLY transaction running one statement, rolled back."""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import islice

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import DiagnosticField, ExecStatus
from psycopg.pq.abc import PGresult

from dbtools.connection_defaults import CONNECT_TIMEOUT_S, POOL_SIZE
from dbtools.engines.catalog import ColumnInfo, ForeignKey, TableInfo
from dbtools.engines.database import Database
from dbtools.engines.postgres_pool import PooledConnection, PostgresPool
from dbtools.engines.postgres_value_cap import capped_statement
from dbtools.engines.result_caps import ResultCaps
from dbtools.errors import ConnectionFailedError, QueryError, QueryTimeoutError, first_line
from dbtools.query_limits import DEFAULT_QUERY_LIMITS, QueryLimits

logger = logging.getLogger(__name__)

# A query's rows are read about this many values at a time: libpq 17 and newer hand over a chunk of rows per
# result (chunked rows mode) instead of one result per row, which costs psycopg an object and a wait per row.
# Each value is cut at the character cap, so a chunk bounds the memory a result holds beyond what is kept.
CHUNK_VALUES = 256
MAX_CHUNK_ROWS = 64
_CHUNKED_ROWS = psycopg.pq.version() >= 170000

_USER_SCHEMAS = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%' "
    "AND n.nspname NOT LIKE 'pg\\_temp\\_%'"
)
# Only relations the role may read: the rest would only lead the model into "permission denied".
_RELATIONS_SQL = f"""
SELECT c.oid, n.nspname, c.relname, quote_ident(n.nspname), quote_ident(c.relname), c.relkind,
       obj_description(c.oid, 'pg_class'), c.reltuples::bigint,
       CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition AND {_USER_SCHEMAS}
  AND has_schema_privilege(n.oid, 'USAGE') AND has_any_column_privilege(c.oid, 'SELECT')
ORDER BY n.nspname <> 'public', n.nspname, c.relname
"""
_COLUMNS_SQL = """
SELECT a.attrelid, a.attname, quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
       t.typnamespace = 'pg_catalog'::regnamespace, a.attnotnull, col_description(a.attrelid, a.attnum)
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""
_CONSTRAINTS_SQL = """
SELECT con.conrelid, con.contype, con.confrelid, con.confrelid::regclass::text,
       ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(num, pos)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.pos),
       ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(num, pos)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num ORDER BY k.pos),
       ARRAY(SELECT quote_ident(a.attname) FROM unnest(con.confkey) WITH ORDINALITY k(num, pos)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num ORDER BY k.pos)
FROM pg_constraint con
WHERE con.contype IN ('p', 'f') AND con.conrelid = ANY(%s)
ORDER BY con.conrelid, con.contype DESC, con.oid
"""
# Any DDL or COMMENT writes new catalog row versions, so their xmin sums change.
_SCHEMA_MARKER_SQL = """
SELECT (SELECT count(*) || '.' || sum(xmin::text::bigint) FROM pg_class),
       (SELECT count(*) || '.' || sum(xmin::text::bigint) FROM pg_attribute WHERE attnum > 0),
       (SELECT count(*) || '.' || sum(xmin::text::bigint) FROM pg_constraint),
       (SELECT count(*) || '.' || sum(xmin::text::bigint) FROM pg_description)
"""
_FINGERPRINT_SQL = """
SELECT c.reltuples, pg_relation_size(c.oid), s.n_tup_ins, s.n_tup_upd, s.n_tup_del, s.n_live_tup
FROM pg_class c LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid WHERE c.oid = %s
"""


class PostgresDatabase(Database):
    """A PostgreSQL database behind a connection pool; safe for many threads at once."""

    dialect = "postgres"
    result_names_by_text = False  # a function's name, a column's, or ?column?
    placeholder = "%s"
    # The check sums over pg_class, pg_attribute, pg_constraint and pg_description, system catalogs included:
    # about 10 ms a call on a small database.
    schema_check_interval_s = 2.0

    def __init__(
        self,
        conninfo: str,
        display_name: str,
        *,
        limits: QueryLimits = DEFAULT_QUERY_LIMITS,
        pool_size: int = POOL_SIZE,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
    ) -> None:
        super().__init__(display_name, limits=limits)
        connect_args = {
            "connect_timeout": max(2, connect_timeout_s),  # libpq's minimum
            "application_name": "sqlscout",
            # A server that vanished without closing its connections (a failover, a dropped network) is
            # noticed: unacknowledged writes fail after the connect timeout, a silent server after ~25 s.
            "tcp_user_timeout": max(2, connect_timeout_s) * 1000,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        try:
            first = PooledConnection.connect(conninfo, **connect_args)
        except psycopg.Error as exc:
            raise ConnectionFailedError(f"cannot connect to {display_name}: {first_line(exc)}") from None
        if first.info.parameter_status("is_superuser") == "on":
            logger.warning(
                "connected to %s as superuser %r: read-only transactions hold, but a superuser can read every "
                "catalog and file the server exposes; connect as a SELECT-only role",
                display_name,
                first.info.user,
            )
        self._oids: dict[str, int] = {}
        self._pool = PostgresPool(
            conninfo,
            connect_args,
            size=pool_size,
            server=f"PostgreSQL at {_address(first)}",
            configure=_configure,
            first=first,
        )

    @contextmanager
    def _transaction(self, timeout_s: float) -> Iterator[psycopg.Connection]:
        """A pooled connection inside a fresh READ ONLY transaction with a statement timeout; rolled back.

        A free connection is waited for up to the call's own timeout: the calls holding them end by theirs.
        """
        started = time.perf_counter()
        statement_timeout = f"{max(1, round(timeout_s * 1000))}ms"
        try:
            with self._pool.connection(
                timeout_s,
                lambda conn: conn.execute(
                    "SELECT set_config('statement_timeout', %s, true)", (statement_timeout,)
                ),
            ) as conn:
                yield conn
        except pg_errors.QueryCanceled as exc:
            elapsed = time.perf_counter() - started
            # The call's own statement_timeout ended it, whatever our clock says (the server's may end it a moment
            # earlier); other cancels (pg_cancel_backend) say "user request" and come before the timeout.
            if "statement timeout" in first_line(exc) or elapsed >= timeout_s:
                raise QueryTimeoutError(max(elapsed, timeout_s), timeout_s) from None
            raise QueryError(f"cancelled on the server before the timeout: {first_line(exc)}") from None
        except psycopg.Error as exc:
            lost = exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))
            if isinstance(exc, psycopg.OperationalError) and lost:
                raise ConnectionFailedError(
                    f"lost the connection to {self._pool.server} ({first_line(exc)}); the next call reconnects"
                ) from None
            raise QueryError(_engine_message(exc)) from None

    def _run_capped(self, sql: str, caps: ResultCaps, timeout_s: float) -> list[tuple[str, str | None]]:
        with self._transaction(timeout_s) as conn, conn.cursor() as cursor:
            described = _described(conn, sql)
            type_oids = [described.ftype(i) for i in range(described.nfields)]
            # One row past the cap, so that the cap still sees that more rows exist.
            capped = capped_statement(sql, type_oids, caps.max_chars, caps.max_rows + 1)
            # stream() always uses the extended protocol: one statement, never a script.
            chunk = min(MAX_CHUNK_ROWS, max(1, CHUNK_VALUES // max(1, len(type_oids))))
            rows = cursor.stream(capped.sql if capped else sql, size=chunk if _CHUNKED_ROWS else 1)
            read = 0
            while batch := list(islice(rows, chunk)):
                read += len(batch)
                if not caps.add_rows([capped.restore(row) for row in batch] if capped else batch):
                    break
            if capped and read == caps.max_rows + 1:
                # The LIMIT has ended the statement: reading its end costs less than the cancel close() sends.
                for _ in rows:
                    pass
            rows.close()
            return _columns(conn, described)

    def inheritance_parents(self) -> set[str]:
        # Partitioned tables are left out: their rows are all their partitions', which the catalog does not list.
        rows = self.stream(
            "SELECT DISTINCT n.nspname, c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
        )
        return {name if schema == "public" else f"{schema}.{name}" for schema, name in rows}

    def _plan(self, sql: str, timeout_s: float) -> str:
        # Options first: whatever the statement starts with, it cannot be read as EXPLAIN's own options. stream()
        # uses the extended protocol, which runs exactly one statement.
        with self._transaction(timeout_s) as conn, conn.cursor() as cursor:
            return "\n".join(
                line.rstrip() for (line,) in cursor.stream("EXPLAIN (ANALYZE FALSE, COSTS TRUE) " + sql)
            )

    def _compile_error(self, sql: str) -> str | None:
        with self._transaction(self.timeout_s) as conn:
            # Parse and plan as the unnamed prepared statement: nothing runs.
            result = conn.pgconn.prepare(b"", sql.encode())
            if result.status == ExecStatus.FATAL_ERROR:
                error = _prepare_error(conn, result)
                if isinstance(error, psycopg.OperationalError):
                    raise error  # the connection, not the statement
                return _engine_message(error)
        return None

    def stream(self, sql: str, params: Sequence = (), *, timeout_s: float | None = None) -> Iterator[tuple]:
        with self._transaction(timeout_s or self.timeout_s) as conn, conn.cursor() as cursor:
            yield from cursor.stream(sql, tuple(params) if params else None)

    def _catalog_rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        return list(self.stream(sql, params, timeout_s=max(self.timeout_s, 30.0)))

    def _schema_marker(self) -> object:
        return self._catalog_rows(_SCHEMA_MARKER_SQL)[0]

    def _load_tables(self) -> list[TableInfo]:
        relations = self._catalog_rows(_RELATIONS_SQL)
        oids = [r[0] for r in relations]
        columns: dict[int, list[tuple]] = {}
        for row in self._catalog_rows(_COLUMNS_SQL, (oids,)):
            columns.setdefault(row[0], []).append(row[1:])
        constraints: dict[int, list[tuple]] = {}
        for row in self._catalog_rows(_CONSTRAINTS_SQL, (oids,)):
            constraints.setdefault(row[0], []).append(row[1:])

        names = {
            oid: (name if schema == "public" else f"{schema}.{name}") for oid, schema, name, *_ in relations
        }
        sql_names = {
            oid: (qname if schema == "public" else f"{qschema}.{qname}")
            for oid, schema, _, qschema, qname, *_ in relations
        }
        tables = []
        for oid, *_, kind, comment, reltuples, viewdef in relations:
            primary: tuple[str, ...] = ()
            foreign: list[ForeignKey] = []
            rendered_refs: list[str] = []
            for contype, ref_oid, ref_regclass, cols, ref_cols, quoted_ref_cols in constraints.get(oid, []):
                if contype == "p":
                    primary = tuple(cols)
                    continue
                foreign.append(ForeignKey(tuple(cols), names.get(ref_oid, ref_regclass), tuple(ref_cols)))
                rendered_refs.append(f"{sql_names.get(ref_oid, ref_regclass)}({', '.join(quoted_ref_cols)})")
            column_infos = tuple(
                ColumnInfo(
                    name=col, type=col_type, nullable=not notnull, primary_key=col in primary, comment=note
                )
                for col, _qcol, col_type, _builtin, notnull, note in columns.get(oid, [])
            )
            if kind in ("v", "m"):
                keyword = "MATERIALIZED VIEW" if kind == "m" else "VIEW"
                create_sql = f"CREATE {keyword} {sql_names[oid]} AS {viewdef.strip().rstrip(';')}"
            else:
                create_sql = _render_create_table(
                    sql_names[oid], columns.get(oid, []), primary, foreign, rendered_refs
                )
            tables.append(
                TableInfo(
                    name=names[oid],
                    columns=column_infos,
                    foreign_keys=tuple(foreign),
                    create_sql=create_sql,
                    comment=comment,
                    row_estimate=reltuples if reltuples is not None and reltuples >= 0 else None,
                )
            )
        self._oids = {names[oid]: oid for oid in oids}
        self._table_parts = {names[oid]: (schema, name) for oid, schema, name, *_ in relations}
        return tables

    def _normalise_table_name(self, name: str) -> str:
        cleaned = super()._normalise_table_name(name)
        return cleaned[len("public.") :] if cleaned.lower().startswith("public.") else cleaned

    def fingerprint(self, table: str) -> str:
        info = self.table(table)
        oid = self._oids[info.name]
        row = self._catalog_rows(_FINGERPRINT_SQL, (oid,))
        return ":".join(str(v) for v in row[0]) if row else ""

    def close(self) -> None:
        self._pool.close()


def _render_create_table(
    qualified: str,
    columns: list[tuple],
    primary: tuple[str, ...],
    foreign: list[ForeignKey],
    rendered_refs: list[str],
) -> str:
    """An equivalent CREATE TABLE in the style SQLite stores: one line, FOREIGN KEY clauses last."""
    quoted = {col: qcol for col, qcol, *_ in columns}
    parts = []
    for col, qcol, col_type, builtin, notnull, _note in columns:
        definition = f"{qcol} {col_type.upper() if builtin else col_type}"
        if primary == (col,):
            definition += " PRIMARY KEY"
        if notnull:
            definition += " NOT NULL"
        parts.append(definition)
    if len(primary) > 1:
        parts.append(f"PRIMARY KEY ({', '.join(quoted[c] for c in primary)})")
    for key, reference in zip(foreign, rendered_refs, strict=True):
        parts.append(
            f"FOREIGN KEY ({', '.join(quoted.get(c, c) for c in key.columns)}) REFERENCES {reference}"
        )
    return f"CREATE TABLE {qualified} ({', '.join(parts)})"


def _prepare_error(conn: psycopg.Connection, result: PGresult) -> psycopg.Error:
    """A failed prepare's error: the server's own, or OperationalError when no server answered (a lost connection
    has no SQLSTATE, which error_from_result would turn into a plain DatabaseError, read as a bad statement)."""
    if result.error_field(DiagnosticField.SQLSTATE) is None:
        message = result.get_error_message() or conn.pgconn.get_error_message()
        return psycopg.OperationalError(message or "the connection to the server was lost")
    return pg_errors.error_from_result(result, encoding=conn.info.encoding)


def _described(conn: psycopg.Connection, sql: str) -> PGresult:
    """The server's description of a statement, prepared as the unnamed statement; its error if it has none."""
    pgconn = conn.pgconn
    prepared = pgconn.prepare(b"", sql.encode(conn.info.encoding))
    if prepared.status != ExecStatus.COMMAND_OK:
        raise _prepare_error(conn, prepared)
    # Sent and awaited here, not with describe_prepared(), which waits for the server holding the GIL: a
    # server that stalled then froze every thread of the process.
    pgconn.send_describe_prepared(b"")
    while pgconn.flush():
        select.select([], [pgconn.socket], [])
    results = []
    while True:  # every result of the command, until libpq is ready for the next one
        while pgconn.is_busy():
            select.select([pgconn.socket], [], [])
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            break
        results.append(result)
    if not results or results[0].status != ExecStatus.COMMAND_OK:
        raise psycopg.OperationalError(pgconn.get_error_message())
    return results[0]


def _columns(conn: psycopg.Connection, described: PGresult) -> list[tuple[str, str | None]]:
    """Each column's name and type, as a statement's description gives them."""
    return [
        (
            described.fname(i).decode(conn.info.encoding),
            _type_name(conn, described.ftype(i), described.fmod(i)),
        )
        for i in range(described.nfields)
    ]


def _type_name(conn: psycopg.Connection, oid: int, modifier: int) -> str | None:
    """A result column's type as PostgreSQL names it (integer, numeric(8,2), text[]); None for a type the driver
    does not know (an enum, a domain)."""
    known = conn.adapters.types.get(oid)
    if known is None:
        return None
    if modifier >= 0:
        return known.get_type_display(oid=oid, fmod=modifier)
    return known.regtype + ("[]" if oid == known.array_oid else "")


def _configure(conn: psycopg.Connection) -> None:
    conn.read_only = True  # psycopg then opens every transaction with BEGIN READ ONLY
    conn.autocommit = False
    conn.prepare_threshold = None  # no server-side prepared statements left behind on pooled connections


def _address(conn: psycopg.Connection) -> str:
    """host:port of a connection, or the socket file of a Unix-domain one."""
    host, port = conn.info.host, conn.info.port
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else f"{host}:{port}"


def _engine_message(exc: psycopg.Error) -> str:
    """The server's message with its LINE/caret context where libpq gave one."""
    return str(exc).strip() or type(exc).__name__

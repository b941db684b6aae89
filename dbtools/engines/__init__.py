"""Open a database by DSN: SQLite and DuckDB files and PostgreSQL and MySQL/MariaDB servers behind one read-only
interface."""

from __future__ import annotations

from dbtools.connection_defaults import CONNECT_TIMEOUT_S, POOL_SIZE
from dbtools.engines.catalog import ColumnInfo, ForeignKey, TableInfo
from dbtools.engines.database import Database
from dbtools.engines.dsn import missing_relative_url_file, parse_dsn
from dbtools.engines.results import QueryResult
from dbtools.engines.sqlite import SQLiteDatabase
from dbtools.errors import ConnectionFailedError
from dbtools.query_limits import DEFAULT_QUERY_LIMITS, QueryLimits

__all__ = [
    "ColumnInfo",
    "Database",
    "ForeignKey",
    "PostgresDatabase",
    "QueryResult",
    "SQLiteDatabase",
    "TableInfo",
    "open_database",
]


def __getattr__(name: str):
    # psycopg takes 0.2 s to import and is absent where only SQLite is used: loaded with the first use.
    if name == "PostgresDatabase":
        from dbtools.engines.postgres import PostgresDatabase

        return PostgresDatabase
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_database(
    dsn: str | None = None,
    *,
    timeout_s: float = DEFAULT_QUERY_LIMITS.timeout_s,
    max_rows: int = DEFAULT_QUERY_LIMITS.max_rows,
    max_chars: int = DEFAULT_QUERY_LIMITS.max_chars,
    connect_timeout_s: int = CONNECT_TIMEOUT_S,
    pool_size: int = POOL_SIZE,
    display_name: str | None = None,
) -> Database:
    """Open `dsn` read-only; None opens the bundled demo database (built on first use).

    "path.sqlite" or "sqlite:///path" opens SQLite; "path.duckdb", "duckdb:///path", CSV/Parquet/JSON files or a
    folder of them open DuckDB; "postgresql://..." or a libpq "host=... dbname=..." string opens PostgreSQL and
    "mysql://..." or "mariadb://..." MySQL or MariaDB, with at most `pool_size` connections, each made within
    `connect_timeout_s`. `display_name` replaces the masked DSN in messages (a server reached through a tunnel).
    Queries run under `timeout_s`, `max_rows` and `max_chars` unless a call asks for less (QueryLimits; a
    limit that is not positive raises ValueError). Raises ConnectionFailedError with the reason when it cannot.
    """
    limits = QueryLimits(timeout_s, max_rows, max_chars)
    if dsn is None:
        from dbtools.demo import default_demo_path

        return SQLiteDatabase(default_demo_path(), limits=limits)
    parsed = parse_dsn(dsn)
    missing = missing_relative_url_file(dsn, parsed.target)
    if missing:
        raise ConnectionFailedError(missing)
    if parsed.engine == "sqlite":
        return SQLiteDatabase(parsed.target, limits=limits)
    # DuckDB's, PyMySQL's and psycopg's modules take 0.1-0.3 s to import: only a DSN needing one imports it.
    if parsed.engine == "duckdb":
        from dbtools.engines.duckdb_engine import DuckDBDatabase

        return DuckDBDatabase(parsed.target, limits=limits)
    if parsed.engine == "mysql":
        from dbtools.engines.mysql import MySQLDatabase

        return MySQLDatabase(
            parsed.target,
            display_name or parsed.display_name,
            limits=limits,
            pool_size=pool_size,
            connect_timeout_s=connect_timeout_s,
        )
    from dbtools.engines.postgres import PostgresDatabase

    return PostgresDatabase(
        parsed.target,
        display_name or parsed.display_name,
        limits=limits,
        pool_size=pool_size,
        connect_timeout_s=connect_timeout_s,
    )

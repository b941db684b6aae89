"""Open a database by DSN: SQLite files and PostgreSQL servers behind one read-only interface."""

from __future__ import annotations

from dbtools.engines.base import ColumnInfo, Database, ForeignKey, QueryResult, TableInfo
from dbtools.engines.dsn import missing_relative_url_file, parse_dsn
from dbtools.engines.postgres import PostgresDatabase
from dbtools.engines.sqlite import SQLiteDatabase
from dbtools.errors import ConnectionFailedError

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


def open_database(
    dsn: str | None = None,
    *,
    timeout_s: float = 10.0,
    max_rows: int = 1000,
    max_chars: int = 100_000,
    connect_timeout_s: int = 5,
    pool_size: int = 10,
) -> Database:
    """Open `dsn` read-only; None opens the bundled demo database (built on first use).

    "path.sqlite" or "sqlite:///path" opens SQLite; "postgresql://..." or a libpq "host=... dbname=..."
    string opens PostgreSQL, with at most `pool_size` connections, each made within `connect_timeout_s`.
    Raises ConnectionFailedError with the reason when it cannot.
    """
    if dsn is None:
        from dbtools.demo import default_demo_path

        return SQLiteDatabase(
            default_demo_path(), timeout_s=timeout_s, max_rows=max_rows, max_chars=max_chars
        )
    parsed = parse_dsn(dsn)
    if parsed.engine == "sqlite":
        missing = missing_relative_url_file(dsn, parsed.target)
        if missing:
            raise ConnectionFailedError(missing)
        return SQLiteDatabase(parsed.target, timeout_s=timeout_s, max_rows=max_rows, max_chars=max_chars)
    return PostgresDatabase(
        parsed.target,
        parsed.display_name,
        timeout_s=timeout_s,
        max_rows=max_rows,
        max_chars=max_chars,
        pool_size=pool_size,
        connect_timeout_s=connect_timeout_s,
    )

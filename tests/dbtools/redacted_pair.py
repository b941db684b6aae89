"""The hidden-data oracle's two databases on one engine: the original, whose hidden cells and filtered-out rows hold
a marker, served under RULES; and its physically redacted copy (hidden tables and columns dropped, filtered rows
deleted), read directly with the engine's own driver. A query through the rules must be refused or answer exactly
as the copy does."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import psycopg

from dbtools.access.rules import VisibilityRules
from tests.fixture_schema import mysql_connection

MARKER = "ZQX"
# (name, [(column, type, hidden)], [rows], the rows a filter keeps or None).
TABLES: list[tuple[str, list[tuple[str, str, bool]], list[tuple], Callable[[tuple], bool] | None]] = [
    (
        "customers",
        [
            ("id", "INT", False),
            ("name", "VARCHAR(64)", False),
            ("email", "VARCHAR(64)", True),
            ("region", "VARCHAR(8)", False),
        ],
        [
            (1, "Ada", f"{MARKER}-ada@x", "EU"),
            (2, "Grace", f"{MARKER}-grace@x", "EU"),
            (3, f"{MARKER}-us", f"{MARKER}-u@x", "US"),
        ],
        lambda row: row[3] == "EU",
    ),
    (
        "orders",
        [
            ("id", "INT", False),
            ("customer_id", "INT", False),
            ("total", "INT", False),
            ("margin", "INT", True),
            ("note", "VARCHAR(64)", False),
            ("region", "VARCHAR(8)", False),
        ],
        [(1, 1, 10, 3, "10", "EU"), (2, 2, 20, 5, "20", "EU"), (3, 3, 30, 900, f"{MARKER}-note", "US")],
        lambda row: row[5] == "EU",
    ),
    ("secrets", [("id", "INT", False), ("token", "VARCHAR(64)", False)], [(1, f"{MARKER}-secret")], None),
    (
        "employees",
        [
            ("id", "INT", False),
            ("name", "VARCHAR(64)", False),
            ("dept_id", "INT", False),
            ("salary", "INT", True),
        ],
        [(1, "Ann", 1, 5000), (2, "Bob", 1, 7000), (3, "Cid", 2, 9100)],
        None,
    ),
    # salary is visible here: a NATURAL JOIN with employees must not join on the hidden one.
    ("bonuses", [("id", "INT", False), ("salary", "INT", False)], [(1, 5000), (2, 100), (3, 9100)], None),
    (
        "Customer",
        [("CustomerId", "INT", False), ("Name", "VARCHAR(64)", False), ("Email", "VARCHAR(64)", True)],
        [(1, "Luis", f"{MARKER}-luis@x"), (2, "Leonie", f"{MARKER}-leonie@x")],
        None,
    ),
    (
        "Invoice",
        [
            ("InvoiceId", "INT", False),
            ("CustomerId", "INT", False),
            ("Total", "INT", False),
            ("Region", "VARCHAR(8)", False),
        ],
        [(1, 1, 4, "EU"), (2, 2, 8, "EU"), (3, 2, 777, "US")],
        lambda row: row[3] == "EU",
    ),
]
HIDDEN_TABLES = {"secrets"}
VIEWS = [
    ("eu_view", "SELECT id, name, region FROM customers"),
    ("email_view", "SELECT id, email FROM customers"),  # reads a hidden column: hidden itself
]
ENGINES = ["sqlite", "duckdb", "postgres", "mysql"]


def quote(name: str, engine: str) -> str:
    return f"`{name}`" if engine == "mysql" else f'"{name}"'


def rules(engine: str) -> VisibilityRules:
    q = lambda name: quote(name, engine)  # noqa: E731
    return VisibilityRules(
        hidden_tables=tuple(HIDDEN_TABLES),
        hidden_columns=tuple(f"{t}.{c}" for t, columns, _, _ in TABLES for c, _, hidden in columns if hidden),
        row_filters=(
            ("customers", "region = 'EU'"),
            ("orders", "region = 'EU'"),
            ("Invoice", f"{q('Region')} = 'EU'"),
        ),
    )


def statements(engine: str, redacted: bool) -> Iterator[tuple[str, tuple]]:
    """The DDL and rows of the original, or of its redacted copy."""
    placeholder = "?" if engine in ("sqlite", "duckdb") else "%s"
    for table, columns, rows, kept in TABLES:
        if redacted and table in HIDDEN_TABLES:
            continue
        shown = [i for i, (_, _, hidden) in enumerate(columns) if not (redacted and hidden)]
        definition = ", ".join(f"{quote(columns[i][0], engine)} {columns[i][1]}" for i in shown)
        yield f"CREATE TABLE {quote(table, engine)} ({definition})", ()
        for row in rows:
            if redacted and kept is not None and not kept(row):
                continue
            marks = ", ".join([placeholder] * len(shown))
            yield f"INSERT INTO {quote(table, engine)} VALUES ({marks})", tuple(row[i] for i in shown)
    for view, query in VIEWS:
        if not (redacted and "email" in query):
            yield f"CREATE VIEW {view} AS {query}", ()


@dataclass
class RedactedPair:
    engine: str
    original: str  # the DSN served under rules(engine)
    run_redacted: Callable[[str], tuple[list[str], list[tuple]]]  # columns and rows, or the engine's error


@contextmanager
def redacted_pair(engine: str, folder: Path, server_dsn: str | None) -> Iterator[RedactedPair]:
    """The original and its redacted copy on `engine` (a server's DSN for PostgreSQL and MariaDB)."""
    if engine in ("sqlite", "duckdb"):
        paths = [folder / f"{kind}.{engine}" for kind in ("original", "redacted")]
        for path, redacted in zip(paths, (False, True), strict=True):
            with sqlite3.connect(path) if engine == "sqlite" else duckdb.connect(str(path)) as conn:
                for sql, values in statements(engine, redacted):
                    conn.execute(sql, values)
        uri = f"file:{paths[1]}?mode=ro"
        connect = (
            (lambda: sqlite3.connect(uri, uri=True))
            if engine == "sqlite"
            else (lambda: duckdb.connect(str(paths[1]), read_only=True))
        )
        reader = connect()
        # DuckDB names a file's catalog after the file: the copy's is "redacted".
        yield RedactedPair(
            engine, str(paths[0]), lambda sql: _run(reader.execute(sql.replace("original.", "redacted.")))
        )
        reader.close()
        return
    names = [f"oracle_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("original", "redacted")]
    if engine == "postgres":
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            for name in names:
                admin.execute(f'CREATE DATABASE "{name}"')
        dsns = [server_dsn.rsplit("/", 1)[0] + f"/{name}" for name in names]
        for dsn, redacted in zip(dsns, (False, True), strict=True):
            with psycopg.connect(dsn, autocommit=True) as conn:
                for sql, values in statements(engine, redacted):
                    conn.execute(sql, values)
        reader = psycopg.connect(dsns[1], autocommit=True)
        reader.read_only = True

        def run(sql: str):
            with reader.cursor() as cursor:
                return _run(cursor.execute(sql))

        try:
            yield RedactedPair(engine, dsns[0], run)
        finally:
            reader.close()
            with psycopg.connect(server_dsn, autocommit=True) as admin:
                for name in names:
                    admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        return
    with mysql_connection(f"{server_dsn}/mysql") as admin, admin.cursor() as cursor:
        for name in names:
            cursor.execute(f"CREATE DATABASE `{name}`")
    for name, redacted in zip(names, (False, True), strict=True):
        with mysql_connection(f"{server_dsn}/{name}") as conn, conn.cursor() as cursor:
            for sql, values in statements(engine, redacted):
                cursor.execute(sql, values or None)
    reader = mysql_connection(f"{server_dsn}/{names[1]}")

    def run_mysql(sql: str):
        with reader.cursor() as cursor:
            cursor.execute(sql)
            return _run(cursor)

    try:
        yield RedactedPair(engine, f"{server_dsn}/{names[0]}", run_mysql)
    finally:
        reader.close()
        with mysql_connection(f"{server_dsn}/mysql") as admin, admin.cursor() as cursor:
            for name in names:
                cursor.execute(f"DROP DATABASE `{name}`")


def _run(cursor) -> tuple[list[str], list[tuple]]:
    columns = [d[0] for d in cursor.description or ()]
    return columns, [tuple(row) for row in cursor.fetchall()]

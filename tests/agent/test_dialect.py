"""The model's SQLite SQL rewritten for PostgreSQL, MySQL and DuckDB: syntax transpiled, names matched to the
catalog."""

from __future__ import annotations

import sqlite3
import uuid

import duckdb
import psycopg
import pytest

from dbtools.engines import open_database
from mcp_server.agent.dialect import DialectTranslator
from tests.fixture_schema import mysql_connection

MIXED_CASE_SCHEMA = [
    'CREATE TABLE "AlertLogs" (id INTEGER PRIMARY KEY, "userId" INTEGER, "triggeredAt" TEXT, note TEXT)',
    """INSERT INTO "AlertLogs" VALUES (1, 5, '2021-12-23', NULL), (2, 5, NULL, 'x'), (3, 6, NULL, NULL)""",
]


def _postgres(request) -> str:
    server = request.getfixturevalue("pg_server_dsn")
    name = f"dialect_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = server.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in MIXED_CASE_SCHEMA:
            conn.execute(statement)
    return dsn


def _mysql(request) -> str:
    server = request.getfixturevalue("mariadb_server_dsn")
    name = f"dialect_{uuid.uuid4().hex[:10]}"
    with mysql_connection(f"{server}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    with mysql_connection(f"{server}/{name}") as conn, conn.cursor() as cursor:
        for statement in MIXED_CASE_SCHEMA:
            cursor.execute(statement.replace('"', "`"))
    return f"{server}/{name}"


def _duckdb(request) -> str:
    path = request.getfixturevalue("tmp_path_factory").mktemp("dialect") / "mixed.duckdb"
    with duckdb.connect(str(path)) as conn:
        for statement in MIXED_CASE_SCHEMA:
            conn.execute(statement)
    return str(path)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(_postgres, id="postgres", marks=pytest.mark.postgres),
        pytest.param(_mysql, id="mysql", marks=pytest.mark.mysql),
        pytest.param(_duckdb, id="duckdb"),
    ],
)
def mixed_case_db(request):
    """AlertLogs with its camel-case names on each engine that is not SQLite (each in a database of its own)."""
    database = open_database(request.param(request), timeout_s=5.0)
    yield database
    database.close()


@pytest.mark.parametrize(
    "sqlite_sql, expected_rows",
    [
        ("SELECT COUNT(*) FROM AlertLogs WHERE userId = 5", [(2,)]),
        ("SELECT count(*) FROM alertlogs WHERE USERID = 5", [(2,)]),
        ('SELECT "triggeredAt" FROM AlertLogs WHERE id = 1', [("2021-12-23",)]),
        ("SELECT IFNULL(note, 'none') AS n FROM ALERTLOGS ORDER BY id", [("none",), ("x",), ("none",)]),
        (
            "SELECT a.userId, COUNT(*) AS total FROM AlertLogs a GROUP BY a.userId ORDER BY total",
            [(6, 1), (5, 2)],
        ),
    ],
)
def test_sqlite_sql_runs_on_mixed_case_names(mixed_case_db, sqlite_sql, expected_rows):
    translated = DialectTranslator(mixed_case_db)(sqlite_sql)
    assert mixed_case_db.query(translated).rows == expected_rows


def test_unknown_names_and_unparsable_sql_pass_through(mixed_case_db):
    translate = DialectTranslator(mixed_case_db)
    assert mixed_case_db.quote("AlertLogs") in translate("SELECT nosuch FROM AlertLogs")
    assert "nosuch" in translate("SELECT nosuch FROM AlertLogs")
    broken = "SELEC FROM WHERE ((("
    assert translate(broken) == broken
    too_deep = "SELECT " + "(" * 200 + "1" + ")" * 200
    assert translate(too_deep) == too_deep


def test_sqlite_sql_is_left_alone_on_sqlite(tmp_path):
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE AlertLogs (id INTEGER PRIMARY KEY, userId INTEGER)")
    database = open_database(str(path))
    try:
        sql = "SELECT IFNULL(userid, 0) FROM alertlogs"
        assert DialectTranslator(database)(sql) == sql
    finally:
        database.close()

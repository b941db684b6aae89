"""The model's SQLite SQL rewritten for PostgreSQL: syntax transpiled, names matched to the catalog."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from dbtools.engines import open_database
from mcp_server.agent.dialect import DialectTranslator

MIXED_CASE_SCHEMA = [
    'CREATE TABLE "AlertLogs" (id INTEGER PRIMARY KEY, "userId" INTEGER, "triggeredAt" TEXT, note TEXT)',
    """INSERT INTO "AlertLogs" VALUES (1, 5, '2021-12-23', NULL), (2, 5, NULL, 'x'), (3, 6, NULL, NULL)""",
]


@pytest.fixture(scope="module")
def mixed_case_db(pg_server_dsn):
    name = f"dialect_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in MIXED_CASE_SCHEMA:
            conn.execute(statement)
    database = open_database(dsn, timeout_s=5.0)
    yield database
    database.close()
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.postgres
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
def test_sqlite_sql_runs_on_mixed_case_postgres_names(mixed_case_db, sqlite_sql, expected_rows):
    translated = DialectTranslator(mixed_case_db)(sqlite_sql)
    assert mixed_case_db.query(translated).rows == expected_rows


@pytest.mark.postgres
def test_unknown_names_and_unparsable_sql_pass_through(mixed_case_db):
    translate = DialectTranslator(mixed_case_db)
    assert '"AlertLogs"' in translate("SELECT nosuch FROM AlertLogs")
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

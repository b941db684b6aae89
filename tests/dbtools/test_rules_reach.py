"""Where rules must reach beyond a query's own text: row filters run exactly as written, views that read through
functions or macros, views that name their columns, and PostgreSQL's inheritance children."""

from __future__ import annotations

import sqlite3
import uuid

import duckdb
import psycopg
import pytest

from dbtools.access.rules import VisibilityRules
from dbtools.errors import DatabaseToolError
from dbtools.sources import ServerLimits, SourceSet, SourceSpec

LIMITS = ServerLimits(timeout=5.0, max_rows=100, pool_size=2, connect_timeout=5)
MARKER = "ZQX"


def served(dsn: str, rules: VisibilityRules):
    sources = SourceSet([SourceSpec("main", dsn, rules=rules)], LIMITS)
    return sources, sources.get(None).database()


def test_a_row_filter_runs_as_written_not_as_sqlglot_would_write_it(tmp_path):
    """DuckDB's `~` matches the whole string; regexp_matches(), which sqlglot writes for it, matches anywhere."""
    path = tmp_path / "accounts.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE accounts (id INT, name VARCHAR, region VARCHAR)")
        conn.execute(
            f"INSERT INTO accounts VALUES (1, 'Ada', 'EU'), (2, 'Bo', 'UK'), (3, '{MARKER}', 'NON-EU')"
        )
    sources, db = served(str(path), VisibilityRules(row_filters=(("accounts", "region ~ 'EU|UK'"),)))
    try:
        assert db.query("SELECT name FROM accounts ORDER BY id").rows == [("Ada",), ("Bo",)]
        assert db.query("SELECT count(*) FROM accounts").rows == [(2,)]
    finally:
        sources.close()


def test_views_that_read_through_a_macro_are_hidden(tmp_path):
    path = tmp_path / "macros.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE secrets (token VARCHAR)")
        conn.execute(f"INSERT INTO secrets VALUES ('{MARKER}-secret')")
        conn.execute("CREATE TABLE t (id INT, region VARCHAR)")
        conn.execute(f"INSERT INTO t VALUES (1, 'EU'), (2, '{MARKER}')")
        conn.execute("CREATE MACRO all_tokens() AS TABLE SELECT * FROM secrets")
        conn.execute("CREATE MACRO all_t() AS TABLE SELECT * FROM t")
        conn.execute("CREATE VIEW v AS SELECT * FROM all_tokens()")
        conn.execute("CREATE VIEW vt AS SELECT * FROM all_t()")
    rules = VisibilityRules(hidden_tables=("secrets",), row_filters=(("t", "region = 'EU'"),))
    sources, db = served(str(path), rules)
    try:
        assert {info.name for info in db.tables()} == {"t"}
        for sql in ("SELECT * FROM v", "SELECT * FROM vt", "SELECT * FROM all_t()"):
            with pytest.raises(DatabaseToolError):
                db.query(sql)
    finally:
        sources.close()


def test_a_view_that_names_its_columns_keeps_them_when_read_through(tmp_path):
    path = tmp_path / "views.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INT, pub TEXT, secret TEXT, region TEXT)")
        conn.execute("INSERT INTO t VALUES (1, 'EU', 'x', 'north'), (2, 'p2', 'y', 'EU')")
        conn.execute("CREATE VIEW w(pub, region) AS SELECT region, pub FROM t")
    rules = VisibilityRules(hidden_columns=("t.secret",), row_filters=(("w", "region = 'EU'"),))
    with sqlite3.connect(path) as conn:
        truth = conn.execute("SELECT pub, region FROM w WHERE region = 'EU'").fetchall()
    sources, db = served(str(path), rules)
    try:
        assert db.query("SELECT pub, region FROM w").rows == truth == [("north", "EU")]
    finally:
        sources.close()


@pytest.fixture
def postgres_database(pg_server_dsn):
    name = f"reach_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    yield dsn
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_postgres_views_through_functions_and_inheritance_children_keep_the_rules(postgres_database):
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE secrets (id INT, token TEXT)")
        conn.execute(f"INSERT INTO secrets VALUES (1, '{MARKER}-secret')")
        conn.execute("CREATE FUNCTION f() RETURNS SETOF secrets LANGUAGE sql AS 'SELECT * FROM secrets'")
        conn.execute("CREATE VIEW vf AS SELECT * FROM f()")
        conn.execute("CREATE VIEW vf2 AS SELECT 1 AS id, (SELECT max(token) FROM f()) AS t")
        conn.execute("CREATE TABLE parent (id INT, region TEXT)")
        conn.execute("INSERT INTO parent VALUES (1, 'EU')")
        conn.execute("CREATE TABLE hidden_child (extra TEXT) INHERITS (parent)")
        conn.execute(f"INSERT INTO hidden_child VALUES (2, '{MARKER}-child', 'x')")
    rules = VisibilityRules(hidden_tables=("secrets", "hidden_child"))
    sources, db = served(postgres_database, rules)
    try:
        assert {info.name for info in db.tables()} == {"parent"}
        assert db.query("SELECT * FROM parent").rows == [(1, "EU")]
        assert db.query("SELECT count(*) FROM parent p").rows == [(1,)]
        for sql in ("SELECT * FROM vf", "SELECT * FROM vf2", "SELECT * FROM f()"):
            with pytest.raises(DatabaseToolError):
                db.query(sql)
        with pytest.raises(DatabaseToolError, match="format_type"):
            db.query("SELECT format_type(o::oid, NULL) FROM generate_series(16384, 16460) o")
    finally:
        sources.close()

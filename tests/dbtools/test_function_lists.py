"""The allow lists of functions (dbtools/access/functions/<dialect>.txt): every name on them is a function the
engine has, none on PostgreSQL's changes state or reads the catalog, and the functions that ordinary queries
use (the demo database's questions, the agent's own queries, an assistant's usual SQL) are on them."""

from __future__ import annotations

import json
import sqlite3

import duckdb
import psycopg
import pytest

from dbtools.access.functions import LISTS, allowed_functions
from dbtools.access.rules import VisibilityRules
from dbtools.engines import open_database
from dbtools.safety import check_query
from dbtools.sources import ServerLimits, SourceSet, SourceSpec
from tests.server.conftest import PROJECT_ROOT

# Names on a list that the engine's function catalog does not list: syntax it parses itself, or functions it
# implements outside the catalog.
SYNTAX = {
    "sqlite": {"cast"},
    "duckdb": {
        "cast",
        "try_cast",
        "extract",
        "coalesce",
        "current_time",
        "current_timestamp",
        "if",
        "ifnull",
    },
    "postgres": {
        "cast",
        "coalesce",
        "nullif",
        "greatest",
        "least",
        "extract",
        "position",
        "overlay",
        "substring",
        "trim",
        "current_date",
        "current_time",
        "current_timestamp",
        "localtime",
        "localtimestamp",
        "normalize",
        "json_object",
        "any_value",
        "date_add",
        "date_subtract",
    },
}
# SQLite functions newer than some SQLite builds Python ships with (3.40): 3.41 (unhex, octet_length, timediff),
# 3.42 (json_error_position), 3.44 (concat, concat_ws, string_agg, if), 3.45 (jsonb), 3.46 (median is an
# extension's; generate_series and json_each are table-valued), 3.50 (unistr).
NEWER_SQLITE = {
    "unhex",
    "octet_length",
    "timediff",
    "json_error_position",
    "concat",
    "concat_ws",
    "string_agg",
    "if",
    "jsonb",
    "median",
    "generate_series",
    "json_each",
    "json_tree",
    "unistr",
}
# Volatile PostgreSQL functions that still only compute: the clock and random numbers.
VOLATILE_BUT_PURE = {"random", "clock_timestamp", "timeofday"}
# An assistant's and the agent's usual SQL (the agent's queries in its trained protocol look the same).
ORDINARY = [
    "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'",
    "SELECT c.name, SUM(o.total) AS spent FROM customers c JOIN orders o ON o.customer_id = c.id "
    "GROUP BY c.name ORDER BY spent DESC LIMIT 5",
    "SELECT AVG(price), MIN(price), MAX(price) FROM products",
    "SELECT UPPER(name), LOWER(name), LENGTH(name), SUBSTR(name, 1, 3), TRIM(name) FROM customers",
    "SELECT COALESCE(city, 'unknown'), NULLIF(city, '') FROM customers",
    "SELECT ROUND(AVG(quantity), 2), ABS(-1) FROM order_items",
    "SELECT name, ROW_NUMBER() OVER (ORDER BY id), RANK() OVER (ORDER BY id), LAG(id) OVER (ORDER BY id) FROM customers",
    "SELECT CAST(id AS TEXT), REPLACE(name, 'a', 'b') FROM customers WHERE name LIKE 'A%'",
    "SELECT CASE WHEN price > 10 THEN 'high' ELSE 'low' END FROM products",
    "SELECT COUNT(DISTINCT customer_id) FROM orders",
]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres", "mysql", "duckdb"])
def test_the_ordinary_queries_pass(dialect):
    for sql in ORDINARY:
        check_query(sql, dialect)


def test_the_demo_questions_answer_the_same_under_rules(demo_database):
    """Every gold query of the demo's questions, through rules that rewrite the tables they read, answers as it
    does without them."""
    lines = (PROJECT_ROOT / "benchmarks" / "eval" / "questions" / "demo.jsonl").read_text().splitlines()
    gold = [json.loads(line)["gold_sql"] for line in lines]
    limits = ServerLimits(timeout=30.0, max_rows=1000, pool_size=2, connect_timeout=5)
    # A filter that keeps every row and a hidden column no question reads: every table the rules touch is
    # rewritten, and the answers must not change.
    keeps_all = VisibilityRules(
        hidden_columns=("*.sqlscout_nothing",), row_filters=(("orders", "1 = 1"), ("customers", "1 = 1"))
    )
    sources = SourceSet([SourceSpec("demo", str(demo_database), rules=keeps_all)], limits)
    plain = open_database(str(demo_database))
    try:
        ruled = sources.get(None).database()
        for sql in gold:
            assert ruled.query(sql).rows == plain.query(sql).rows, sql
    finally:
        plain.close()
        sources.close()


def test_every_sqlite_name_is_a_sqlite_function():
    with sqlite3.connect(":memory:") as conn:
        known = {name for (name,) in conn.execute("SELECT name FROM pragma_function_list")}
    assert allowed_functions("sqlite") - known - SYNTAX["sqlite"] - NEWER_SQLITE == set()


def test_every_duckdb_name_is_a_duckdb_function():
    with duckdb.connect() as conn:
        known = {
            name
            for (name,) in conn.execute("SELECT DISTINCT function_name FROM duckdb_functions()").fetchall()
        }
    assert allowed_functions("duckdb") - known - SYNTAX["duckdb"] == set()


@pytest.mark.postgres
def test_every_postgres_name_is_a_builtin_that_only_computes(pg_server_dsn):
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        kinds = dict(
            conn.execute("SELECT proname, max(provolatile) FROM pg_proc GROUP BY proname").fetchall()
        )
    listed = allowed_functions("postgres")
    assert listed - kinds.keys() - SYNTAX["postgres"] == set()
    assert {name for name in listed if kinds.get(name) == "v"} - VOLATILE_BUT_PURE == set()


def test_each_list_is_sorted_into_reviewed_groups_without_repeats():
    for path in LISTS.glob("*.txt"):
        names = [
            line.strip()
            for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        assert len(names) == len(set(names)), path.name
        assert all(name == name.lower() and " " not in name for name in names), path.name

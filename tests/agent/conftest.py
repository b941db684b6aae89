"""Fixtures of the agent tests: a small company database on every engine, and the Qwen3.5 tokenizer."""

from __future__ import annotations

import sqlite3
import uuid

import duckdb
import psycopg
import pytest

from benchmarks.random_checkpoint import write_tokenizer_files
from dbtools.engines import open_database
from model.tokenizer import Tokenizer
from tests.dbtools.fixture_schema import mysql_connection

SCHEMA = [
    "CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT)",
    "CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept_id INTEGER, salary REAL, "
    "hired TEXT, FOREIGN KEY (dept_id) REFERENCES departments(id))",
]
DEPARTMENTS = [(1, "Sales", "Boston"), (2, "Research", "Denver"), (3, "Support", None)]
EMPLOYEES = [
    (1, "Ada", 1, 5200.0, "2019-03-01"),
    (2, "Bo", 1, 4100.0, "2021-07-15"),
    (3, "Cy", 2, 6100.0, "2018-01-09"),
    (4, "Di", 2, 5900.0, "2020-11-30"),
    (5, "Ed", 3, 3900.0, "2022-05-02"),
    (6, "Flo", 1, 4500.0, "2023-02-20"),
    (7, "Gus", None, 3000.0, "2024-01-01"),
]


def _fill(execute) -> None:
    for statement in SCHEMA:
        execute(statement, ())
    for row in DEPARTMENTS:
        execute("INSERT INTO departments VALUES (%s, %s, %s)", row)
    for row in EMPLOYEES:
        execute("INSERT INTO employees VALUES (%s, %s, %s, %s, %s)", row)


@pytest.fixture(scope="session")
def sqlite_dsn(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("agent-db") / "company.sqlite"
    with sqlite3.connect(path) as conn:
        _fill(lambda sql, params: conn.execute(sql.replace("%s", "?"), params))
    return str(path)


@pytest.fixture(scope="session")
def postgres_dsn(pg_server_dsn) -> str:
    name = f"agent_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        _fill(lambda sql, params: conn.execute(sql, params))
    yield dsn
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mysql_dsn(mariadb_server_dsn) -> str:
    name = f"agent_{uuid.uuid4().hex[:10]}"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    dsn = f"{mariadb_server_dsn}/{name}"
    with mysql_connection(dsn) as conn, conn.cursor() as cursor:
        _fill(cursor.execute)
    yield dsn
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE `{name}`")


@pytest.fixture(scope="session")
def duckdb_dsn(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("agent-db") / "company.duckdb"
    with duckdb.connect(str(path)) as conn:
        _fill(lambda sql, params: conn.execute(sql.replace("%s", "?"), params))
    return str(path)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
        "duckdb",
    ]
)
def other_dialect_db(request):
    """The company database on each engine that speaks another dialect than the model's SQLite."""
    database = open_database(request.getfixturevalue(f"{request.param}_dsn"), timeout_s=5.0)
    yield database
    database.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request):
    dsn = request.getfixturevalue("sqlite_dsn" if request.param == "sqlite" else "postgres_dsn")
    database = open_database(dsn, timeout_s=5.0)
    yield database
    database.close()


@pytest.fixture
def sqlite_db(sqlite_dsn):
    database = open_database(sqlite_dsn, timeout_s=5.0)
    yield database
    database.close()


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen35-tokenizer")
    write_tokenizer_files(path)
    return path


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir) -> Tokenizer:
    return Tokenizer.from_model_dir(tokenizer_dir)

"""Fixtures of the database-layer tests: the same small schema in SQLite, PostgreSQL, MariaDB and DuckDB."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from dbtools.engines import open_database
from tests.dbtools.fixture_schema import (
    build_duckdb,
    build_mysql,
    build_postgres,
    build_sqlite,
    mysql_connection,
    write_csv_folder,
)

# Every engine the layer serves, with the marker of the server it needs.
ENGINES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
    "duckdb",
]


@pytest.fixture(scope="session")
def sqlite_dsn(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sqlite-fixture") / "fixture.sqlite"
    build_sqlite(str(path))
    return str(path)


@pytest.fixture(scope="session")
def postgres_dsn(pg_server_dsn) -> str:
    """A uniquely named database in the session's PostgreSQL server, holding the fixture schema."""
    name = f"dbtools_core_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    build_postgres(dsn)
    yield dsn
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mysql_dsn(mariadb_server_dsn) -> str:
    """A uniquely named database in the session's MariaDB server, holding the fixture schema."""
    name = f"dbtools_core_{uuid.uuid4().hex[:10]}"
    dsn = f"{mariadb_server_dsn}/{name}"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    build_mysql(dsn)
    yield dsn
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE `{name}`")


@pytest.fixture(scope="session")
def duckdb_dsn(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("duckdb-fixture") / "fixture.duckdb"
    build_duckdb(str(path))
    return str(path)


@pytest.fixture(scope="session")
def csv_dsn(tmp_path_factory) -> str:
    """The fixture tables as a folder of CSV files, opened by DuckDB (no keys: CSV has none)."""
    folder = tmp_path_factory.mktemp("csv-fixture")
    write_csv_folder(folder)
    return str(folder)


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    return request.param


@pytest.fixture
def dsn(engine, request) -> str:
    return request.getfixturevalue(f"{engine}_dsn")


@pytest.fixture
def db(dsn):
    database = open_database(dsn, timeout_s=5.0)
    yield database
    database.close()


@pytest.fixture
def open_db():
    """open_database for tests that need their own options; everything opened is closed at teardown."""
    opened = []

    def factory(dsn: str | None, **options):
        database = open_database(dsn, **options)
        opened.append(database)
        return database

    yield factory
    for database in opened:
        database.close()

"""Fixtures of the database-layer tests: the same small schema in SQLite and in a PostgreSQL database."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from dbtools.engines import open_database
from tests.dbtools.fixture_schema import build_postgres, build_sqlite


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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request) -> str:
    return request.param


@pytest.fixture
def dsn(engine, request) -> str:
    return request.getfixturevalue("sqlite_dsn" if engine == "sqlite" else "postgres_dsn")


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

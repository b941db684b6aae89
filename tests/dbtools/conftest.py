"""Fixtures of the database-layer tests: the fixture database (tests/conftest.py) opened on each engine."""

from __future__ import annotations

import pytest

from dbtools.engines import open_database
from tests.fixture_schema import ENGINES


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

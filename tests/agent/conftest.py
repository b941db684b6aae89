"""Fixtures of the agent tests: the fixture database (tests/conftest.py, with its small company: departments and
employees) on every engine, and the Qwen3.5 tokenizer."""

from __future__ import annotations

import pytest

from benchmarks.random_checkpoint import write_tokenizer_files
from dbtools.engines import open_database
from model.tokenizer import Tokenizer


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
        "duckdb",
    ]
)
def other_dialect_db(request):
    """The fixture database on each engine that speaks another dialect than the model's SQLite."""
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

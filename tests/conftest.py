"""Session fixtures shared by the whole suite: the Triton interpreter switch and a real PostgreSQL."""

from __future__ import annotations

import os

import torch

# The interpreter must be chosen before any @triton.jit function is defined, i.e. before kernels import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from dbtools.throwaway_postgres import PostgresServer  # noqa: E402


@pytest.fixture(scope="session")
def pg_server_dsn():
    """DSN of an empty throwaway PostgreSQL server; SQLSCOUT_TEST_PG_DSN points at an existing one instead.

    A server that cannot start fails the tests that need it: PostgreSQL tests are never skipped.
    """
    existing = os.environ.get("SQLSCOUT_TEST_PG_DSN")
    if existing:
        yield existing
        return
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()

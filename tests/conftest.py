"""Session fixtures shared by the whole suite: the Triton interpreter switch, a real PostgreSQL and MariaDB, and a
cache directory of the run's own."""

from __future__ import annotations

import os

import torch

# The interpreter must be chosen before any @triton.jit function is defined, i.e. before kernels import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from dbtools.throwaway_mariadb import MariaDBServer  # noqa: E402
from dbtools.throwaway_postgres import PostgresServer  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def run_cache_dir(tmp_path_factory):
    """SQLSCOUT_CACHE_DIR for the whole run: the demo database and value indexes that tests build go to a
    temporary folder, never into the user's ~/.cache/sqlscout. Subprocess helpers pass it on."""
    path = tmp_path_factory.mktemp("sqlscout-cache")
    previous = os.environ.get("SQLSCOUT_CACHE_DIR")
    os.environ["SQLSCOUT_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        del os.environ["SQLSCOUT_CACHE_DIR"]
    else:
        os.environ["SQLSCOUT_CACHE_DIR"] = previous


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


@pytest.fixture(scope="session")
def mariadb_server_dsn():
    """DSN (root, no database named) of a throwaway MariaDB server; SQLSCOUT_TEST_MYSQL_DSN points at an existing
    MySQL or MariaDB server instead.

    A server that cannot start fails the tests that need it: MySQL tests are never skipped.
    """
    existing = os.environ.get("SQLSCOUT_TEST_MYSQL_DSN")
    if existing:
        yield existing.rstrip("/")
        return
    server = MariaDBServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd():
    """A throwaway OpenSSH server on loopback (Debian's openssh-server); tests may kill and start it again.

    A server that cannot start fails the tests that need it: SSH tests are never skipped.
    """
    from dbtools.throwaway_sshd import SshServer

    server = SshServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def running_sshd(sshd):
    """The session's sshd, started again if an earlier test left it down."""
    if not sshd.running:
        sshd.start()
    return sshd

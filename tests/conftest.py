"""Session fixtures shared by the whole suite: the Triton interpreter switch, a real PostgreSQL, MariaDB and OpenSSH
server, a cache directory of the run's own, and the fixture database (tests/fixture_schema.py) on every engine;
benchmarks' recording switched off; and how the suite shares the cores among pytest-xdist's workers. Tiers are
marked where each test is written (`slow`, `postgres`, `mysql`, `gpu`)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import torch

# The interpreter must be chosen before any @triton.jit function is defined, i.e. before kernels import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A benchmark that a test runs, in this process or in one it starts, must not replace the recorded results with a
# test's numbers.
os.environ["SQLSCOUT_BENCH_NO_RECORD"] = "1"

# Under pytest-xdist the workers share the cores: each worker, and the servers and engines its tests start, takes
# its share of threads, so that the workers' products do not oversubscribe them.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(share))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

import pytest  # noqa: E402

# The database fixtures import the database packages (psycopg, DuckDB, PyMySQL, sqlglot) where they are used: the GPU
# machine runs tests/kernels through this file and has none of them.

MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per core, at most MAX_WORKERS (each starts its own database servers)."""
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


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
    from benchmarks.servers.postgres import PostgresServer

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
    from benchmarks.servers.mariadb import MariaDBServer

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
    from benchmarks.servers.sshd import SshServer

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


@pytest.fixture(scope="session")
def demo_database(run_cache_dir) -> Path:
    """The default demo database, built once per run through default_demo_path() into the run's cache directory,
    where open_database(None) and the servers that tests start find it."""
    from dbtools.demo import default_demo_path

    previous = os.environ["SQLSCOUT_CACHE_DIR"]
    os.environ["SQLSCOUT_CACHE_DIR"] = str(run_cache_dir)  # a test may point it elsewhere for the moment
    try:
        return default_demo_path()
    finally:
        os.environ["SQLSCOUT_CACHE_DIR"] = previous


# The fixture database on each engine, built once per run. Tests only read it; one that changes it puts it back.
@pytest.fixture(scope="session")
def sqlite_dsn(tmp_path_factory) -> str:
    from tests.fixture_schema import build_sqlite

    path = tmp_path_factory.mktemp("sqlite-fixture") / "fixture.sqlite"
    build_sqlite(str(path))
    return str(path)


@pytest.fixture(scope="session")
def postgres_dsn(pg_server_dsn) -> str:
    """A uniquely named database in the session's PostgreSQL server, dropped at the end of the run."""
    import psycopg

    from tests.fixture_schema import build_postgres

    name = f"sqlscout_fixture_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    try:
        build_postgres(dsn)
        yield dsn
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mysql_dsn(mariadb_server_dsn) -> str:
    """A uniquely named database in the session's MariaDB server, dropped at the end of the run."""
    from tests.fixture_schema import build_mysql, mysql_connection

    name = f"sqlscout_fixture_{uuid.uuid4().hex[:10]}"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    dsn = f"{mariadb_server_dsn}/{name}"
    try:
        build_mysql(dsn)
        yield dsn
    finally:
        with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")


@pytest.fixture(scope="session")
def duckdb_dsn(tmp_path_factory) -> str:
    from tests.fixture_schema import build_duckdb

    path = tmp_path_factory.mktemp("duckdb-fixture") / "fixture.duckdb"
    build_duckdb(str(path))
    return str(path)


@pytest.fixture(scope="session")
def csv_dsn(tmp_path_factory) -> str:
    """The fixture tables as a folder of CSV files, one per table with a header line, opened by DuckDB (no keys:
    CSV has none)."""
    from tests.fixture_schema import write_csv_folder

    folder = tmp_path_factory.mktemp("csv-fixture")
    write_csv_folder(folder)
    return str(folder)

"""Database faults on real servers: PostgreSQL stopped, restarted under load, its backends terminated, its
connections cut by a proxy, its pool full, a value of fifty megabytes.

Each fault is answered within a few seconds by a message that says what is wrong, and the next call succeeds.
The PostgreSQL server is this module's own, since the tests stop and restart it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from benchmarks.servers.postgres import PostgresServer
from dbtools.engines import Database, open_database, postgres
from dbtools.errors import ConnectionFailedError, DatabaseBusyError, DatabaseToolError
from tests.faults.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres

CONNECT_TIMEOUT_S = 2
SLACK_S = 3.0  # on top of the time a fault may take: a shared, busy test machine
SLOW_SQL = "SELECT count(*) FROM generate_series(1, 100000) AS a, generate_series(1, 100000) AS b"  # minutes


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def open_pg(server) -> Iterator[Callable[..., Database]]:
    """open_database on the module's server (or `dsn`), with a short connect timeout; closed at teardown."""
    opened: list[Database] = []

    def factory(dsn: str | None = None, **options) -> Database:
        db = open_database(dsn or server.dsn, connect_timeout_s=CONNECT_TIMEOUT_S, **options)
        opened.append(db)
        return db

    yield factory
    for db in opened:
        db.close()


def timed(call: Callable[[], object]) -> tuple[float, object]:
    """How long `call` took, and what it returned or raised."""
    started = time.perf_counter()
    try:
        outcome = call()
    except Exception as exc:
        outcome = exc
    return time.perf_counter() - started, outcome


def admin(server: PostgresServer, sql: str) -> list[tuple]:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def wait_for_slow_queries(server: PostgresServer, count: int) -> None:
    """Until `count` slow queries have been running for a moment: a cancel that reaches a backend between
    the messages of its statement (Parse, then Bind and Execute) is ignored."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        [(running,)] = admin(
            server,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sqlscout' AND state = 'active' "
            "AND query LIKE '%generate_series(1, 100000) AS b%' AND now() - query_start > interval '0.2 s'",
        )
        if running >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} slow queries never ran at once")


def run_in_threads(
    calls: list[Callable[[], object]],
) -> tuple[list[threading.Thread], list[tuple[float, object]]]:
    outcomes: list[tuple[float, object]] = []
    threads = [threading.Thread(target=lambda c=c: outcomes.append(timed(c))) for c in calls]
    for thread in threads:
        thread.start()
    return threads, outcomes


def hold_idle_connections(server: PostgresServer, db: Database, count: int) -> None:
    """Leave `count` idle connections in the pool: as many calls at once, cancelled together."""
    threads, outcomes = run_in_threads([lambda: db.query(SLOW_SQL, timeout_s=30)] * count)
    wait_for_slow_queries(server, count)
    admin(server, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'sqlscout'")
    for thread in threads:
        thread.join()
    assert all(isinstance(o, DatabaseToolError) for _, o in outcomes), outcomes


def assert_next_call_is_quick(db: Database) -> None:
    elapsed, outcome = timed(lambda: db.query("SELECT 1").rows)
    assert outcome == [(1,)] and elapsed < 1.0


def assert_no_stray_cancels(server: PostgresServer) -> None:
    """No cancel request went to a backend that had ended (nor, arriving late, to a later statement)."""
    log = (server.root / "server.log").read_text()
    assert "did not match any process" not in log


def test_a_stopped_server_is_reported_within_the_connect_timeout(server, open_pg):
    db = open_pg(pool_size=5)
    hold_idle_connections(server, db, 5)
    server.shut_down()
    try:
        for call in (lambda: db.query("SELECT 1"), db.tables):
            elapsed, outcome = timed(call)
            assert isinstance(outcome, ConnectionFailedError)
            assert str(outcome) == f"cannot reach PostgreSQL at 127.0.0.1:{server.port} (connection refused)"
            assert elapsed < CONNECT_TIMEOUT_S + SLACK_S
    finally:
        server.start()
    assert_next_call_is_quick(db)


def test_a_backend_terminated_mid_query_is_a_clear_error_and_the_next_call_reconnects(server, open_pg):
    db = open_pg(timeout_s=30)
    threads, outcomes = run_in_threads([lambda: db.query(SLOW_SQL)])
    wait_for_slow_queries(server, 1)
    admin(
        server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'sqlscout'"
    )
    threads[0].join()
    [(elapsed, outcome)] = outcomes
    assert isinstance(outcome, ConnectionFailedError)
    assert str(outcome) == (
        f"lost the connection to PostgreSQL at 127.0.0.1:{server.port} "
        "(terminating connection due to administrator command); the next call reconnects"
    )
    assert elapsed < SLACK_S
    assert_next_call_is_quick(db)
    assert_no_stray_cancels(server)


@pytest.mark.parametrize("closed_by", ["the server", "a proxy"])
def test_idle_connections_closed_underneath_cost_no_wait(server, open_pg, closed_by):
    """A restart, a failover or a proxy's idle timeout closes every pooled connection at once: the next call
    reconnects at once instead of checking each dead connection in turn."""
    proxy = TcpProxy(server.port)
    try:
        db = open_pg(f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres", pool_size=6)
        hold_idle_connections(server, db, 6)
        if closed_by == "a proxy":
            proxy.cut_connections()
        else:
            admin(
                server,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'sqlscout'",
            )
        assert_next_call_is_quick(db)
        assert_next_call_is_quick(db)
    finally:
        proxy.close()


def test_a_full_pool_says_how_many_calls_run_and_the_limit(server, open_pg):
    db = open_pg(pool_size=2, timeout_s=1)
    threads, outcomes = run_in_threads([lambda: db.query(SLOW_SQL, timeout_s=30)] * 2)
    try:
        wait_for_slow_queries(server, 2)
        elapsed, outcome = timed(lambda: db.query("SELECT 1"))
        assert isinstance(outcome, DatabaseBusyError)
        assert str(outcome) == (
            f"all 2 connections to PostgreSQL at 127.0.0.1:{server.port} are busy with running queries; "
            "retry shortly or raise --pool-size"
        )
        assert 1.0 <= elapsed < 1.0 + SLACK_S  # it waited its own timeout for a connection
    finally:
        admin(
            server, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'sqlscout'"
        )
        for thread in threads:
            thread.join()
    assert_next_call_is_quick(db)
    assert_no_stray_cancels(server)


# Slow (left out of the fast tier): restarts the PostgreSQL server.
@pytest.mark.slow
def test_a_restart_under_load_gives_clear_errors_and_no_stall(server, open_pg):
    db = open_pg(pool_size=4, timeout_s=5)
    stop = threading.Event()

    def keep_querying() -> None:
        while not stop.is_set():
            outcomes.append(timed(lambda: db.query("SELECT count(*) FROM generate_series(1, 200000)").rows))
            time.sleep(0.01)

    outcomes: list[tuple[float, object]] = []
    workers = [threading.Thread(target=keep_querying) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.5)
        server.shut_down()
        time.sleep(3.0)  # long enough for calls to find the server gone
        server.start()
        time.sleep(0.5)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert max(elapsed for elapsed, _ in outcomes) < CONNECT_TIMEOUT_S + SLACK_S
    failures = [o for _, o in outcomes if isinstance(o, Exception)]
    assert failures, "no call saw the restart"
    for failure in failures:
        assert isinstance(failure, ConnectionFailedError), failure
        assert str(failure).startswith(
            (f"cannot reach PostgreSQL at 127.0.0.1:{server.port} (", "lost the connection to PostgreSQL at")
        ), failure
    threads, after = run_in_threads([lambda: db.query("SELECT 1").rows] * 8)
    for thread in threads:
        thread.join()
    assert [o for _, o in after] == [[(1,)]] * 8 and max(e for e, _ in after) < 1.0


def test_a_result_stopped_at_the_row_cap_is_cancelled_not_read_to_the_end(open_pg):
    """The statement a capped result leaves running is still cancelled (only ended ones are not)."""
    db = open_pg(max_rows=10, timeout_s=30)
    elapsed, result = timed(
        lambda: db.query("SELECT a.g FROM generate_series(1, 1000) a(g), generate_series(1, 100000) b")
    )
    assert result.row_count == 10 and result.truncated
    assert elapsed < SLACK_S  # reading all 100 million rows takes minutes


def test_a_result_that_reaches_its_limit_is_read_to_its_end_not_cancelled(server, open_pg):
    """The wrapper's LIMIT ends a capped statement one row past the cap: its end is read on the same connection
    instead of a cancel request, which libpq sends over a connection of its own."""
    proxy = TcpProxy(server.port)
    try:
        db = open_pg(f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres", max_rows=10)
        db.query("SELECT 1")
        before = proxy.connections
        for _ in range(3):
            result = db.query("SELECT g FROM generate_series(1, 100000) g")
            assert result.row_count == 10 and result.truncated
        assert proxy.connections == before
        assert db.query("SELECT 2").rows == [(2,)]
    finally:
        proxy.close()


def test_a_huge_value_is_cut_before_it_leaves_the_server(server, open_pg):
    """libpq reads a whole row at once: a 50 MB value would travel whole before the character cap cut it."""
    proxy = TcpProxy(server.port)
    try:
        db = open_pg(f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres", max_chars=1000)
        before = proxy.bytes_from_server
        elapsed, result = timed(lambda: db.query("SELECT repeat('x', 50000000) AS big, 7 AS small"))
        assert proxy.bytes_from_server - before < 100_000
        assert result.columns == ["big", "small"] and result.column_types == ["text", "integer"]
        assert result.truncated
        assert result.rows == [("x" * (1000 - 4 - 1), 7)]  # the cap less the separators and the 7
        assert elapsed < SLACK_S
        assert_next_call_is_quick(db)
    finally:
        proxy.close()


def test_cutting_long_values_keeps_names_types_order_and_short_values(open_pg):
    db = open_pg(max_chars=1000)
    result = db.query(
        "SELECT to_jsonb(repeat('y', 50000)) AS j, '{\"a\": 1}'::jsonb AS j, ARRAY[1, 2] AS arr, "
        "'ab'::char(3) AS c, '\\x0102'::bytea AS b"
    )
    assert result.columns == ["j", "j", "arr", "c", "b"]
    assert result.column_types == ["jsonb", "jsonb", "integer[]", "bpchar(3)", "bytea"]
    [(cut, short, array, padded, blob)] = result.rows  # a value cut on the server comes as its text
    assert cut.startswith('"yyy') and short == {"a": 1} and array == [1, 2] and padded == "ab "
    assert blob == b"\x01\x02"
    ordered = db.query("SELECT g, 'x' AS t FROM generate_series(1, 3) g ORDER BY g DESC -- last\n;")
    assert ordered.rows == [(3, "x"), (2, "x"), (1, "x")]


def test_a_backend_lost_just_before_the_prepare_is_a_lost_connection_not_a_bad_statement(
    server, open_pg, monkeypatch
):
    # A restart under load can end a backend between the transaction's start and the statement's prepare:
    # libpq's error then has no SQLSTATE, and it must read as the connection lost, as at every other step.
    db = open_pg(pool_size=1)
    real_described = postgres._described

    def described_after_the_backend_ends(conn, sql):
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,))
        return real_described(conn, sql)

    monkeypatch.setattr(postgres, "_described", described_after_the_backend_ends)
    with pytest.raises(ConnectionFailedError, match="^lost the connection to PostgreSQL at "):
        db.query("SELECT 1")
    monkeypatch.setattr(postgres, "_described", real_described)
    assert db.query("SELECT 1").rows == [(1,)]

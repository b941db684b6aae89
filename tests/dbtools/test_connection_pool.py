"""The pool the PostgreSQL and MySQL engines share, over a scripted driver: reuse, replacement of connections the
server closed, errors that keep the connection, a full pool, idle expiry and first-come-first-served waiting."""

from __future__ import annotations

import threading
import time

import pytest

from dbtools.engines import connection_pool
from dbtools.engines.connection_pool import ConnectionPool
from dbtools.errors import ConnectionFailedError, DatabaseBusyError


class Lost(Exception):
    """What the scripted driver raises on a connection its server has closed."""


class Conn:
    def __init__(self, number: int) -> None:
        self.number = number
        self.server_closed = False
        self.closed = False
        self.rollbacks = 0


class ScriptedPool(ConnectionPool[Conn]):
    def __init__(self, size: int = 2, reachable: bool = True) -> None:
        self.made: list[Conn] = []
        self.reachable = reachable
        super().__init__(size=size, server="Scripted at here:1")

    def connect(self) -> Conn:
        if not self.reachable:
            raise ConnectionFailedError(f"cannot reach {self.server} (refused)")
        conn = Conn(len(self.made))
        self.made.append(conn)
        return conn

    def lost(self, conn: Conn, error: BaseException) -> bool:
        return isinstance(error, Lost)

    def ready_for_reuse(self, conn: Conn) -> bool:
        conn.rollbacks += 1
        return not conn.server_closed

    def discard(self, conn: Conn) -> None:
        conn.closed = True


def begin(conn: Conn) -> None:
    if conn.server_closed:
        raise Lost("server closed the connection")


def test_a_connection_is_readied_and_reused_by_the_next_call():
    pool = ScriptedPool()
    with pool.connection(1.0, begin) as first:
        pass
    with pool.connection(1.0, begin) as second:
        pass
    assert second is first and first.rollbacks == 2 and len(pool.made) == 1


def test_idle_connections_the_server_closed_cost_one_reconnect_and_are_all_dropped():
    pool = ScriptedPool(size=3)
    with pool.connection(1.0, begin) as a, pool.connection(1.0, begin) as b, pool.connection(1.0, begin) as c:
        pass
    for conn in (a, b, c):
        conn.server_closed = True
    with pool.connection(1.0, begin) as fresh:
        assert fresh not in (a, b, c)
    assert all(conn.closed for conn in (a, b, c))
    assert len(pool.made) == 4


def test_a_failure_that_is_not_a_lost_connection_is_raised_and_the_connection_kept():
    pool = ScriptedPool()
    with pool.connection(1.0, begin) as conn:
        pass

    def refuse(_: Conn) -> None:
        raise ValueError("statement_timeout is not a number")

    with pytest.raises(ValueError), pool.connection(1.0, refuse):
        pass
    assert not conn.closed
    with pool.connection(1.0, begin) as again:
        assert again is conn


def test_a_server_that_cannot_be_reached_is_reported_and_frees_the_slot():
    pool = ScriptedPool(size=1, reachable=False)
    for _ in range(2):
        with (
            pytest.raises(ConnectionFailedError, match="cannot reach Scripted at here:1"),
            pool.connection(1.0, begin),
        ):
            pass


def test_a_full_pool_says_how_many_connections_are_busy():
    pool = ScriptedPool(size=1)
    with pool.connection(1.0, begin):
        started = time.monotonic()
        with pytest.raises(DatabaseBusyError, match="all 1 connections to Scripted at here:1 are busy"):
            with pool.connection(0.2, begin):
                pass
        assert 0.15 < time.monotonic() - started < 2.0


def test_connections_idle_too_long_are_closed_instead_of_reused(monkeypatch):
    pool = ScriptedPool()
    with pool.connection(1.0, begin) as old:
        pass
    monkeypatch.setattr(connection_pool, "MAX_IDLE_S", 0.0)
    time.sleep(0.01)
    with pool.connection(1.0, begin) as new:
        assert new is not old
    assert old.closed


def test_waiting_calls_get_connections_in_order_of_arrival():
    pool = ScriptedPool(size=1)
    served: list[int] = []
    holder = pool.connection(5.0, begin)
    holder.__enter__()
    threads = []
    for number in range(5):
        thread = threading.Thread(target=lambda n=number: _take(pool, n, served))
        thread.start()
        threads.append(thread)
        time.sleep(0.05)  # each waits before the next arrives
    holder.__exit__(None, None, None)
    for thread in threads:
        thread.join(5.0)
    assert served == [0, 1, 2, 3, 4]


def _take(pool: ScriptedPool, number: int, served: list[int]) -> None:
    with pool.connection(5.0, begin):
        served.append(number)
        time.sleep(0.01)


def test_a_closed_pool_lends_nothing_and_closes_what_comes_back():
    pool = ScriptedPool()
    with pool.connection(1.0, begin) as lent:
        pool.close()
    assert lent.closed
    with pytest.raises(ConnectionFailedError, match="closed"), pool.connection(1.0, begin):
        pass

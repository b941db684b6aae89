"""PostgreSQL connections lent one call at a time, made in the calling thread so that failures are fast and clear.

psycopg_pool connects in the background and retries with growing delays: a stopped server showed up only as a
pool timeout (30 s, no reason given), and each dead idle connection found by its check cost another delay
(1, 2, 4, 8 s ...), so a handful of connections closed by a restart or a proxy stalled the next call. Here a
missing server is reported with libpq's own reason within the connect timeout, a dead idle connection costs
one reconnect, and a pool that is really full is told apart from a server that cannot be reached.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from dbtools.errors import ConnectionFailedError, DatabaseBusyError

logger = logging.getLogger(__name__)

# Idle connections older than this are closed instead of reused: proxies and firewalls drop idle connections
# silently, and the server need not keep a burst's connections for good.
MAX_IDLE_S = 300.0
_FAILED_AT_SERVER = re.compile(
    r'connection to server (?:at "[^"]*", port \S+|on socket "[^"]*") failed: (.*)'
)


class PooledConnection(psycopg.Connection):
    """A connection that sends a cancel request only for a statement still running on its server."""

    def cancel_safe(self, *, timeout: float = 30.0) -> None:
        """Cancel the running statement, unless it has already ended.

        psycopg also calls this when a streamed statement ended in an error (a timeout, a terminated backend):
        the request then went to a backend that is gone ("PID ... did not match any process") or, arriving
        late, cancelled the connection's next statement.
        """
        # Called from stream()'s clean-up, where the error being raised, if any, is the statement's own.
        failure = sys.exc_info()[1]
        if isinstance(failure, psycopg.Error) and failure.sqlstate is not None:
            return  # the server ended the statement with this error
        try:
            self.pgconn.consume_input()  # reads the end of a connection the server has closed
        except psycopg.OperationalError:
            return  # the connection is lost, and its backend with it
        super().cancel_safe(timeout=timeout)


class _Slots:
    """`size` slots, handed out first come, first served: with a plain semaphore, a call arriving while a slot
    is being freed could take it ahead of one that had waited, again and again, until its wait ran out."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: deque[threading.Event] = deque()
        self._lock = threading.Lock()

    def acquire(self, timeout_s: float) -> bool:
        """Take a slot, waiting up to `timeout_s` for one; False when none came."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            turn = threading.Event()
            self._waiting.append(turn)
        if turn.wait(timeout_s):
            return True
        with self._lock:
            if turn.is_set():  # handed over as the wait ran out
                return True
            self._waiting.remove(turn)
            return False

    def release(self) -> None:
        """Hand the slot to the call that has waited longest, or free it."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1


class PostgresPool:
    """At most `size` connections, each lent to one call at a time; idle ones are reused newest first."""

    def __init__(
        self,
        conninfo: str,
        connect_args: dict[str, Any],
        *,
        size: int,
        server: str,
        configure: Callable[[psycopg.Connection], None],
        first: psycopg.Connection | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one connection")
        self.size = size
        self.server = server  # "PostgreSQL at host:port", for messages
        self._conninfo = conninfo
        self._connect_args = connect_args
        self._configure = configure
        self._slots = _Slots(size)
        self._lock = threading.Lock()
        self._idle: list[tuple[psycopg.Connection, float]] = []  # with the time each came back, newest last
        self._closed = False
        if first is not None:
            configure(first)
            self._idle.append((first, time.monotonic()))

    @contextmanager
    def connection(
        self, wait_s: float, start: Callable[[psycopg.Connection], None]
    ) -> Iterator[psycopg.Connection]:
        """A connection on which `start` has run, for one call; rolled back and kept afterwards when usable.

        Waits up to `wait_s` for one of the `size` connections to be free (DatabaseBusyError after that). A
        reused connection that the server has closed is found by `start` and replaced by a new one, once;
        a new connection that cannot be made raises ConnectionFailedError with libpq's reason.
        """
        if self._closed:
            raise ConnectionFailedError(f"the connection pool for {self.server} is closed")
        if not self._slots.acquire(max(wait_s, 0.0)):
            raise DatabaseBusyError(
                f"all {self.size} connections to {self.server} are busy with running queries; "
                "retry shortly or raise --pool-size"
            )
        try:
            conn = self._started(start)
            try:
                yield conn
            finally:
                self._put_back(conn)
        finally:
            self._slots.release()

    def _started(self, start: Callable[[psycopg.Connection], None]) -> psycopg.Connection:
        reused = self._take_idle()
        if reused is not None:
            try:
                start(reused)
                return reused
            except psycopg.OperationalError:
                if not reused.closed:
                    self._put_back(reused)
                    raise
            except BaseException:
                self._put_back(reused)
                raise
            # Closed by a restart, a failover or a proxy: the connections idle longer than this one are
            # most likely gone too, so none of them is tried.
            logger.info("the server closed an idle connection to %s; reconnecting", self.server)
            self._drop_idle()
        conn = self._connect()
        try:
            start(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self) -> psycopg.Connection:
        try:
            conn = PooledConnection.connect(self._conninfo, **self._connect_args)
        except psycopg.Error as exc:
            raise ConnectionFailedError(
                f"cannot reach {self.server} ({connect_failure_reason(exc)})"
            ) from None
        self._configure(conn)
        return conn

    def _take_idle(self) -> psycopg.Connection | None:
        with self._lock:
            if not self._idle:
                return None
            conn, since = self._idle.pop()
        if time.monotonic() - since > MAX_IDLE_S:
            conn.close()
            self._drop_idle()  # the others came back even earlier
            return None
        return conn

    def _put_back(self, conn: psycopg.Connection) -> None:
        """Keep `conn` for the next call if it can be brought back to an idle state; else close it."""
        status = conn.info.transaction_status
        if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            try:
                conn.rollback()
            except psycopg.Error:
                conn.close()
        # ACTIVE: a result was left unread; UNKNOWN: the connection is broken. Neither can be reused.
        if self._closed or conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            conn.close()
            return
        with self._lock:
            self._idle.append((conn, time.monotonic()))

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def close(self) -> None:
        """Close the idle connections now and the lent ones when they come back."""
        self._closed = True
        self._drop_idle()


def connect_failure_reason(exc: psycopg.Error) -> str:
    """libpq's reason for a failed connection attempt, without the host and port it repeats."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    first = first.removeprefix("connection failed: ")
    matched = _FAILED_AT_SERVER.search(first)
    reason = re.sub(r"^FATAL:\s+", "", matched.group(1) if matched else first).strip()
    return reason[:1].lower() + reason[1:] if reason[1:2].islower() else reason

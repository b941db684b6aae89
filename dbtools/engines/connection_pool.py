"""Connections lent one call at a time, made in the calling thread so that failures are fast and clear: the pool
of the PostgreSQL and MySQL engines, each driver behind four hooks (connect, lost, ready_for_reuse, discard).

A pool that connects in the background and retries with growing delays (psycopg_pool) showed a stopped server
only as a pool timeout with no reason, and each dead idle connection found by its check cost another delay.
Here a missing server is reported with the driver's own reason within the connect timeout, a dead idle
connection costs one reconnect, and a pool that is really full is told apart from a server that cannot be
reached.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from dbtools.errors import ConnectionFailedError, DatabaseBusyError

logger = logging.getLogger(__name__)

# Idle connections older than this are closed instead of reused: servers, proxies and firewalls drop idle
# connections silently, and the server need not keep a burst's connections for good.
MAX_IDLE_S = 300.0

Connection = TypeVar("Connection")


class FairSlots:
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


class ConnectionPool(ABC, Generic[Connection]):
    """At most `size` connections, each lent to one call at a time; idle ones are reused newest first."""

    def __init__(self, *, size: int, server: str, first: Connection | None = None) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one connection")
        self.size = size
        self.server = server  # "PostgreSQL at host:port", for messages
        self._slots = FairSlots(size)
        self._lock = threading.Lock()
        self._idle: list[tuple[Connection, float]] = []  # with the time each came back, newest last
        self._closed = False
        if first is not None:
            self._idle.append((first, time.monotonic()))

    @abstractmethod
    def connect(self) -> Connection:
        """A new connection; ConnectionFailedError with the driver's reason when it cannot be made."""

    @abstractmethod
    def lost(self, conn: Connection, error: BaseException) -> bool:
        """Whether `error`, raised by a call's first statement on a reused `conn`, says the server closed it."""

    @abstractmethod
    def ready_for_reuse(self, conn: Connection) -> bool:
        """Bring a returned `conn` back to the state of a fresh one (its transaction rolled back); False when
        that cannot be done and it must be closed."""

    @abstractmethod
    def discard(self, conn: Connection) -> None:
        """Close `conn`, also when it is broken."""

    @contextmanager
    def connection(self, wait_s: float, start: Callable[[Connection], None]) -> Iterator[Connection]:
        """A connection on which `start` has run, for one call; readied and kept afterwards when it can be.

        Waits up to `wait_s` for one of the `size` connections to be free (DatabaseBusyError after that). A
        reused connection that the server has closed is found by `start` and replaced by a new one, once;
        a new connection that cannot be made raises ConnectionFailedError with the driver's reason.
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

    def _started(self, start: Callable[[Connection], None]) -> Connection:
        reused = self._take_idle()
        if reused is not None:
            try:
                start(reused)
                return reused
            except BaseException as error:
                if not self.lost(reused, error):
                    self._put_back(reused)
                    raise
                self.discard(reused)
            # Closed by a restart, a failover or a proxy: the connections idle longer than this one are
            # most likely gone too, so none of them is tried.
            logger.info("the server closed an idle connection to %s; reconnecting", self.server)
            self._drop_idle()
        conn = self.connect()
        try:
            start(conn)
        except BaseException:
            self.discard(conn)
            raise
        return conn

    def _take_idle(self) -> Connection | None:
        with self._lock:
            if not self._idle:
                return None
            conn, since = self._idle.pop()
        if time.monotonic() - since > MAX_IDLE_S:
            self.discard(conn)
            self._drop_idle()  # the others came back even earlier
            return None
        return conn

    def _put_back(self, conn: Connection) -> None:
        """Keep `conn` for the next call if it can be readied for reuse; else close it."""
        if self._closed or not self.ready_for_reuse(conn):
            self.discard(conn)
            return
        with self._lock:
            self._idle.append((conn, time.monotonic()))

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            self.discard(conn)

    def close(self) -> None:
        """Close the idle connections now and the lent ones when they come back."""
        self._closed = True
        self._drop_idle()

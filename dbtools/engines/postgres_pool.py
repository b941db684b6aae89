"""PostgreSQL connections for the shared pool: psycopg connections made in the calling thread, a cancel sent only
for a statement still running, and libpq's reason when a connection cannot be made."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from dbtools.engines.connection_pool import ConnectionPool
from dbtools.errors import ConnectionFailedError

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


class PostgresPool(ConnectionPool[psycopg.Connection]):
    """The pool over psycopg: connections configured by `configure` as they are made."""

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
        self._conninfo = conninfo
        self._connect_args = connect_args
        self._configure = configure
        if first is not None:
            configure(first)
        super().__init__(size=size, server=server, first=first)

    def connect(self) -> psycopg.Connection:
        try:
            conn = PooledConnection.connect(self._conninfo, **self._connect_args)
        except psycopg.Error as exc:
            raise ConnectionFailedError(
                f"cannot reach {self.server} ({connect_failure_reason(exc)})"
            ) from None
        self._configure(conn)
        return conn

    def lost(self, conn: psycopg.Connection, error: BaseException) -> bool:
        return isinstance(error, psycopg.OperationalError) and conn.closed

    def ready_for_reuse(self, conn: psycopg.Connection) -> bool:
        if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            try:
                conn.rollback()
            except psycopg.Error:
                return False
        # ACTIVE: a result was left unread; UNKNOWN: the connection is broken. Neither can be reused.
        return not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE

    def discard(self, conn: psycopg.Connection) -> None:
        conn.close()


def connect_failure_reason(exc: psycopg.Error) -> str:
    """libpq's reason for a failed connection attempt, without the host and port it repeats."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    first = first.removeprefix("connection failed: ")
    matched = _FAILED_AT_SERVER.search(first)
    reason = re.sub(r"^FATAL:\s+", "", matched.group(1) if matched else first).strip()
    return reason[:1].lower() + reason[1:] if reason[1:2].islower() else reason

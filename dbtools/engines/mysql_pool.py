"""MySQL and MariaDB connections (PyMySQL) for the shared pool, each call's session state wiped afterwards; DSN
parsing, TLS settings and KILL QUERY for a statement past its timeout."""

from __future__ import annotations

import functools
import logging
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pymysql
import pymysql.connections
from pymysql.constants import FIELD_TYPE

from dbtools.engines.connection_pool import ConnectionPool
from dbtools.errors import ConnectionFailedError

logger = logging.getLogger(__name__)

# Client errors of a connection that is gone: server gone away, lost during a query, lost (no reply).
LOST_CONNECTION_CODES = frozenset({2006, 2013, 2055})
_COM_RESET_CONNECTION = 0x1F  # MySQL 5.7.3+, MariaDB 10.2.4+; PyMySQL has no constant for it
_SSL_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
# SET and TIME values as the server writes them ("a,b", "25:00:00"), not as Python sets and timedeltas.
_CONVERSIONS = {**pymysql.converters.conversions, FIELD_TYPE.SET: str, FIELD_TYPE.TIME: str}


@functools.cache
def _opportunistic_tls() -> ssl.SSLContext:
    """The context of PyMySQL's default "preferred" TLS, which verifies nothing."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class MySQLConnection(pymysql.connections.Connection):
    """PyMySQL's connection with a session reset, a way to cut it off from another thread, and a flag saying it
    must not be reused."""

    spoiled = False  # set when the connection's state is unknown: it is closed instead of reused

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        # PyMySQL builds a context per connection and loads the system's CA certificates into it (100 ms) even
        # for its default mode, which verifies nothing; that one context is built once instead.
        return super()._create_ssl_ctx(sslp) if sslp else _opportunistic_tls()

    def reset_session(self) -> None:
        """COM_RESET_CONNECTION: user variables, temporary tables, locks (GET_LOCK), prepared statements and
        session variables go back to a fresh session's, without reconnecting."""
        self._execute_command(_COM_RESET_CONNECTION, b"")
        self._read_ok_packet()

    def drop_unread_result(self) -> None:
        """Give up a result left unread: the connection is closed rather than reused, and neither it nor the result
        reads the rest first (PyMySQL would read every remaining row)."""
        self.spoiled = True
        if self._result is not None:
            self._result.unbuffered_active = False
        self._result = None

    def cut_off(self) -> None:
        """End a call blocked on this connection from another thread: shutting the socket down wakes it."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def connect_args(url: str, connect_timeout_s: int) -> dict[str, Any]:
    """PyMySQL's arguments for mysql://user:password@host:port/database?ssl-mode=...&ssl-ca=...&unix_socket=..."""
    parts = urlsplit(url)
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ConnectionFailedError(f"name one database in the DSN: {parts.scheme}://user@host:3306/database")
    args: dict[str, Any] = {
        "host": parts.hostname or "localhost",
        "port": parts.port or 3306,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "database": database,
        "charset": "utf8mb4",
        "connect_timeout": connect_timeout_s,
        "autocommit": True,  # transactions are opened explicitly, READ ONLY
        "conv": _CONVERSIONS,
        "program_name": "sqlscout",
    }
    options = {
        key.lower().replace("-", "_"): value for key, value in parse_qsl(parts.query, keep_blank_values=True)
    }
    unknown = set(options) - {"ssl_mode", "ssl_ca", "unix_socket", "socket"}
    if unknown:
        raise ConnectionFailedError(
            f"unknown DSN option {sorted(unknown)[0]!r}: the options are ssl-mode, ssl-ca, unix_socket"
        )
    if "unix_socket" in options or "socket" in options:
        args["unix_socket"] = options.get("unix_socket") or options["socket"]
    args.update(_tls_args(options.get("ssl_mode", "preferred").lower(), options.get("ssl_ca")))
    return args


def _tls_args(mode: str, ca: str | None) -> dict[str, Any]:
    """PyMySQL's TLS arguments for a MySQL ssl-mode and an optional CA file."""
    if mode not in _SSL_MODES:
        raise ConnectionFailedError(f"unknown ssl-mode {mode!r}: use one of {', '.join(_SSL_MODES)}")
    if mode == "disabled":
        return {"ssl_disabled": True}
    if mode == "preferred" and ca is None:
        return {}  # TLS when the server offers it, unverified: PyMySQL's default
    verify = mode in ("verify_ca", "verify_identity") or (mode == "preferred" and ca is not None)
    return {"ssl": {"ca": ca, "verify_mode": verify, "check_hostname": mode == "verify_identity"}}


class MySQLPool(ConnectionPool[MySQLConnection]):
    """The pool over PyMySQL: each call's transaction rolled back and its session reset afterwards, a spoiled
    connection closed instead."""

    def __init__(self, args: dict[str, Any], *, size: int, server: str, first: MySQLConnection) -> None:
        self._args = args
        super().__init__(size=size, server=server, first=first)

    def connect(self) -> MySQLConnection:
        try:
            return MySQLConnection(**self._args)
        except pymysql.Error as exc:
            raise ConnectionFailedError(f"cannot reach {self.server} ({error_text(exc)})") from None

    def lost(self, conn: MySQLConnection, error: BaseException) -> bool:
        return isinstance(error, pymysql.OperationalError) and error.args[0] in LOST_CONNECTION_CODES

    def ready_for_reuse(self, conn: MySQLConnection) -> bool:
        if conn.spoiled or not conn.open:
            return False
        try:
            conn.rollback()
            conn.reset_session()
        except (pymysql.Error, OSError):
            return False
        return True

    def discard(self, conn: MySQLConnection) -> None:
        _close(conn)

    def kill_query(self, conn: MySQLConnection) -> None:
        """Cancel the statement running on `conn` (KILL QUERY from a connection of its own); when the server
        cannot be reached for that, cut `conn` off instead."""
        try:
            killer = self.connect()
        except ConnectionFailedError:
            conn.cut_off()
            return
        try:
            with killer.cursor() as cursor:
                cursor.execute(f"KILL QUERY {int(conn.thread_id())}")
        except pymysql.Error as exc:
            logger.warning(
                "could not cancel a statement on %s (%s); closing its connection", self.server, exc
            )
            conn.cut_off()
        finally:
            _close(killer)


def _close(conn: MySQLConnection) -> None:
    try:
        conn.close()  # releases the socket even when the goodbye cannot be sent
    except pymysql.Error:
        pass  # closed already


def error_text(exc: pymysql.Error) -> str:
    """The server's or the client's message of a PyMySQL error, without its error code."""
    if len(exc.args) >= 2 and isinstance(exc.args[1], str):
        return exc.args[1]
    return str(exc) or type(exc).__name__


class KillTimer:
    """Cancels the statement running on `conn` with KILL QUERY if it is still running `after_s` seconds from now.

    Once fired, the connection is spoiled: a KILL that lands between two statements could cancel the next one.
    """

    def __init__(self, pool: MySQLPool, conn: MySQLConnection, after_s: float) -> None:
        self.started = time.perf_counter()
        self.fired = False
        self._pool = pool
        self._conn = conn
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(after_s, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _kill(self) -> None:
        with self._lock:  # held while the KILL runs, so that stop() returns only once it is over
            if self._done:
                return
            self.fired = True
            self._conn.spoiled = True
            self._pool.kill_query(self._conn)

    def stop(self) -> float:
        """Stop watching; the seconds since the statement started."""
        with self._lock:
            self._done = True
        self._timer.cancel()
        return time.perf_counter() - self.started

"""Idle SQLite connections kept for the next call: a fresh connection parses the whole schema again on its first
statement, which on a database of a few hundred tables costs more than a small query itself."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

MAX_IDLE = 8  # per kind of connection; more run at once only under concurrent calls, and those are closed


class IdleConnections:
    """Connections of one kind (opened by `open_connection`) waiting for their next call.

    A connection is handed out to one caller at a time. When the file at `path` is replaced (a new inode), the
    idle connections, which still read the old file, are closed instead of reused."""

    def __init__(self, path: Path, open_connection: Callable[[], sqlite3.Connection]) -> None:
        self._path = path
        self._open = open_connection
        self._idle: list[tuple[sqlite3.Connection, tuple[int, int]]] = []
        self._lock = threading.Lock()

    def take(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        """An idle connection to the current file, or a new one; with the file identity it was opened on."""
        identity = self._identity()
        with self._lock:
            stale = [conn for conn, opened_on in self._idle if opened_on != identity]
            self._idle = [(conn, opened_on) for conn, opened_on in self._idle if opened_on == identity]
            reused = self._idle.pop() if self._idle else None
        for conn in stale:
            conn.close()
        return reused or (self._open(), identity)

    def give_back(self, conn: sqlite3.Connection, identity: tuple[int, int]) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((conn, identity))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def _identity(self) -> tuple[int, int]:
        try:
            stat = os.stat(self._path)
        except OSError:
            return (0, 0)  # gone: opening will say so
        return (stat.st_dev, stat.st_ino)

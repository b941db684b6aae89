"""SQLite faults: a single function call building a gigabyte string, which the deadline cannot interrupt."""

from __future__ import annotations

import sqlite3
import time

import pytest

from dbtools.engines import open_database
from dbtools.errors import QueryError


def test_sqlite_refuses_a_gigabyte_string_near_the_timeout(tmp_path):
    """printf() builds its string in one call that the deadline cannot interrupt; the value cap stops it."""
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).close()
    db = open_database(str(path), timeout_s=1.0)
    started = time.perf_counter()
    with pytest.raises(QueryError, match="a %c precision of 999999999 would build a value over the 32 MiB"):
        db.query("SELECT printf('%.*c', 999999999, 'x')")
    assert time.perf_counter() - started < 1.0 + 3.0  # 3 s of slack for a busy machine
    assert db.query("SELECT 1").rows == [(1,)]

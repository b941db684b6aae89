"""SQLite connections kept between calls and counts kept while the data is unchanged: what they must not
change about the results."""

from __future__ import annotations

import os
import sqlite3

from tests.fixture_schema import build_sqlite


def view_count_reads(db, monkeypatch) -> list[str]:
    """The statements the engine streams, recorded."""
    seen = []
    stream = db.stream

    def recording(sql, params=(), **options):
        seen.append(sql)
        return stream(sql, params, **options)

    monkeypatch.setattr(db, "stream", recording)
    return seen


def test_a_result_cut_at_its_cap_leaves_no_reader_behind(tmp_path, open_db):
    path = tmp_path / "busy.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(5000)])
    db = open_db(str(path), timeout_s=2.0)
    assert db.query("SELECT x FROM t", max_rows=10).truncated
    # A statement left open would hold a shared lock and this exclusive writer would get "database is locked".
    writer = sqlite3.connect(path, timeout=0)
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("DELETE FROM t WHERE x >= 10")
    writer.commit()
    writer.close()
    assert db.query("SELECT count(*) FROM t").rows == [(10,)]


def test_a_replaced_file_is_read_afresh(tmp_path, open_db):
    path = tmp_path / "swapped.sqlite"
    build_sqlite(str(path))
    db = open_db(str(path))
    assert "users" in {t.name for t in db.tables()}
    replacement = tmp_path / "new.sqlite"
    with sqlite3.connect(replacement) as conn:
        conn.execute("CREATE TABLE only_table (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO only_table VALUES (7)")
    os.replace(replacement, path)
    assert db.query("SELECT id FROM only_table").rows == [(7,)]
    assert [t.name for t in db.tables()] == ["only_table"]


def test_counts_are_remembered_until_the_data_changes(tmp_path, open_db, monkeypatch):
    path = tmp_path / "counted.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(7)])
        conn.execute("CREATE VIEW evens AS SELECT x FROM t WHERE x % 2 = 0")
    db = open_db(str(path))
    reads = view_count_reads(db, monkeypatch)
    view = db.table("evens")
    assert view.row_estimate is None  # a view has no estimate: it is counted
    assert db.row_count(view, timeout_s=1.0) == 4
    assert db.row_count(view, timeout_s=1.0) == 4
    assert sum("COUNT(*)" in sql for sql in reads) == 1
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO t VALUES (8)")
    assert db.row_count(view, timeout_s=1.0) == 5
    assert sum("COUNT(*)" in sql for sql in reads) == 2
    # A count that would take longer than the time left is not attempted; a remembered one costs nothing.
    assert db.row_count(view, timeout_s=0) == 5

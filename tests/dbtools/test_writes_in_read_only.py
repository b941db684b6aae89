"""PostgreSQL functions that write although the transaction is READ ONLY (index maintenance, replication slots, the
OID counter): off the allow list, so refused, as the superuser, with or without rules; and what each would have
changed is checked to be unchanged afterwards."""

from __future__ import annotations

import psycopg
import pytest

from dbtools.access.rules import VisibilityRules
from dbtools.engines import open_database
from dbtools.errors import UnsafeQueryError
from dbtools.sources import ServerLimits, SourceSet, SourceSpec

pytestmark = pytest.mark.postgres

WRITES = [
    "SELECT gin_clean_pending_list('notes_words')",
    "SELECT brin_summarize_new_values('notes_made')",
    "SELECT brin_summarize_range('notes_made', 0)",
    "SELECT brin_desummarize_range('notes_made', 0)",
    "SELECT pg_copy_physical_replication_slot('kept', 'copied')",
    "SELECT * FROM pg_copy_physical_replication_slot('kept', 'copied', false)",
    "SELECT pg_nextoid('pg_class', 'oid', 'pg_class_oid_index')",
    "SELECT n.id FROM notes n WHERE EXISTS (SELECT gin_clean_pending_list('notes_words'))",
    "WITH w AS (SELECT brin_summarize_new_values('notes_made') AS k) SELECT * FROM w",
]


@pytest.fixture(scope="module")
def notes_dsn(postgres_dsn):
    """A table with a GIN index holding a pending list, a BRIN index with unsummarised ranges, and a physical
    replication slot to copy."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id INT, words TEXT[], made INT)")
        conn.execute("CREATE INDEX notes_words ON notes USING gin (words) WITH (fastupdate = on)")
        conn.execute("CREATE INDEX notes_made ON notes USING brin (made) WITH (pages_per_range = 1)")
        conn.execute("INSERT INTO notes SELECT i, ARRAY['w' || i], i FROM generate_series(1, 20000) i")
        conn.execute("SELECT pg_create_physical_replication_slot('kept', true)")
    yield postgres_dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE notes")
        for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def state(dsn: str) -> tuple:
    with psycopg.connect(dsn, autocommit=True) as conn:
        slots = conn.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1").fetchall()
        return tuple(slots)


@pytest.mark.parametrize("with_rules", [False, True])
def test_functions_that_write_in_a_read_only_transaction_are_refused_and_change_nothing(
    notes_dsn, with_rules
):
    limits = ServerLimits(timeout=5.0, max_rows=100, pool_size=2, connect_timeout=5)
    rules = VisibilityRules(hidden_columns=("notes.made",)) if with_rules else VisibilityRules()
    sources = SourceSet([SourceSpec("main", notes_dsn, rules=rules)], limits)
    before = state(notes_dsn)
    try:
        db = sources.get(None).database()
        for sql in WRITES:
            with pytest.raises(UnsafeQueryError, match=r"is not allowed"):
                db.query(sql)
    finally:
        sources.close()
    assert state(notes_dsn) == before == (("kept",),)
    with psycopg.connect(notes_dsn, autocommit=True) as conn:
        # The pending list and the unsummarised ranges are still there to be cleaned and summarised.
        assert conn.execute("SELECT gin_clean_pending_list('notes_words')").fetchone()[0] > 0
        assert conn.execute("SELECT brin_summarize_new_values('notes_made')").fetchone()[0] > 0
        # New rows make a new pending list and new ranges, for the next run of the test.
        conn.execute("INSERT INTO notes SELECT i, ARRAY['v' || i], i FROM generate_series(20001, 40000) i")


def test_the_engine_alone_would_let_them_write(notes_dsn, monkeypatch):
    """What the allow list stands in front of: with the parser check off, READ ONLY does not stop them."""
    import dbtools.engines.database

    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    db = open_database(notes_dsn, timeout_s=5.0)
    try:
        db.query("SELECT pg_copy_physical_replication_slot('kept', 'copied')")
    finally:
        db.close()
    assert ("copied",) in state(notes_dsn)
    with psycopg.connect(notes_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('copied')")

"""Statement timeouts, the row and character caps, and many concurrent calls from threads."""

from __future__ import annotations

import datetime
import decimal
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from dbtools.agent_tools import AgentToolbox
from dbtools.engines import QueryResult
from dbtools.engines.result_caps import ResultCaps
from dbtools.engines.results import row_text
from dbtools.errors import QueryError, QueryTimeoutError
from tests.fixture_schema import mysql_connection
from tests.queries_in_flight import QueriesInFlight

SLOW_QUERY = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "postgres": "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
    # 60 rows to the fifth power, joined row by row.
    "mysql": "SELECT count(*) FROM order_items a, order_items b, order_items c, order_items d, order_items e",
    "duckdb": "SELECT count(*) FROM range(1000000000000) a",
}
# A value of two million characters; MySQL's || is OR, so its concatenation is concat().
HUGE_VALUE = {
    "sqlite": "printf('%.*c', 2000000, 'x')",
    "postgres": "repeat('x', 2000000)",
    "mysql": "repeat('x', 2000000)",
    "duckdb": "repeat('x', 2000000)",
}
FIRST_CHARACTER_AND = {"mysql": "concat(substr(body, 1, 1), {huge})"}
GRACE_S = 3.0  # cancellation is asynchronous; this only bounds "near the timeout" loosely


def test_slow_query_is_cancelled_near_its_timeout(dsn, engine, open_db):
    db = open_db(dsn, timeout_s=0.5)
    # A first query opens the connection, whose start on a loaded machine is not the statement's time.
    db.query("SELECT 1")
    with pytest.raises(QueryTimeoutError) as cancelled:
        db.query(SLOW_QUERY[engine])
    elapsed = cancelled.value.elapsed_s
    assert 0.5 <= elapsed < 0.5 + GRACE_S
    assert f"cancelled after {elapsed:.1f} s (timeout 0.5 s)" in str(cancelled.value)
    assert db.query("SELECT count(*) FROM users").rows == [(30,)]  # the database is usable afterwards


def test_per_call_timeout_overrides_the_default(db, engine):
    with pytest.raises(QueryTimeoutError) as cancelled:
        db.query(SLOW_QUERY[engine], timeout_s=0.3)
    assert cancelled.value.timeout_s == 0.3
    assert cancelled.value.elapsed_s < 0.3 + GRACE_S


def test_stream_is_cancelled_at_its_timeout(db, engine):
    with pytest.raises(QueryTimeoutError):
        list(db.stream(SLOW_QUERY[engine], timeout_s=0.3))


def test_run_query_reports_the_timeout_as_its_message(dsn, engine, open_db):
    db = open_db(dsn, timeout_s=0.4)
    output = AgentToolbox(db).call("run_query", {"sql": SLOW_QUERY[engine]})
    assert output.error is not None and output.text.startswith("query cancelled after ")


def test_row_cap_truncates_and_says_so(dsn, open_db):
    db = open_db(dsn, max_rows=7)
    capped = db.query("SELECT id FROM users ORDER BY id")
    assert capped.rows == [(i,) for i in range(1, 8)]
    assert capped.truncated and capped.row_count == 7
    assert "row cap" in capped.truncation and "LIMIT" in capped.truncation
    exact = db.query("SELECT id FROM users WHERE id <= 7")
    assert exact.row_count == 7 and not exact.truncated and exact.truncation is None
    assert db.query("SELECT id FROM users", max_rows=3).row_count == 3


def test_character_cap_truncates_and_says_so(dsn, open_db):
    db = open_db(dsn, max_chars=10_000)
    result = db.query("SELECT id, body FROM big_text ORDER BY id")
    assert result.truncated and 1 <= result.row_count < 100
    assert sum(len(str(i)) + 3 + len(body) + 1 for i, body in result.rows) <= 10_000
    assert [r[0] for r in result.rows] == list(range(1, result.row_count + 1))
    assert "character cap" in result.truncation


def test_a_single_row_over_the_character_cap_is_still_returned(dsn, open_db):
    db = open_db(dsn, max_chars=100)
    result = db.query("SELECT body FROM big_text ORDER BY id")
    assert result.row_count == 1 and result.truncated
    output = AgentToolbox(db).call("run_query", {"sql": "SELECT body FROM big_text ORDER BY id"})
    assert output.text.splitlines()[-1].startswith("... (stopped after 1 row at the 100-character cap")


@pytest.mark.parametrize("expression", ["substr(body, 1, 1) || {huge}", "{huge}, {huge}"])
def test_one_huge_value_is_cut_to_the_character_cap(dsn, engine, open_db, expression):
    """A single row is returned even when over the cap, but never a megabyte-long value whole."""
    huge = HUGE_VALUE[engine]
    if "||" in expression:
        expression = FIRST_CHARACTER_AND.get(engine, expression)
    db = open_db(dsn, max_chars=1000)
    sql = f"SELECT {expression.format(huge=huge)} FROM big_text WHERE id = 1"
    result = db.query(sql)
    assert result.row_count == 1 and result.truncated
    assert "long values were cut" in result.truncation
    cells = result.rows[0]
    assert all(cell.startswith("x") or cell[1] == "x" for cell in cells)
    assert sum(len(c) for c in cells) + 3 * (len(cells) - 1) + 1 <= 1000
    assert max(len(c) for c in cells) - min(len(c) for c in cells) <= 1  # the cut is shared fairly
    output = AgentToolbox(db).call("run_query", {"sql": sql})
    assert len(output.text) < 1200 and "long values were cut" in output.text


def test_a_huge_blob_is_cut_without_rendering_it_whole(sqlite_dsn, open_db):
    db = open_db(sqlite_dsn, max_chars=100)
    result = db.query("SELECT zeroblob(30000000) UNION ALL SELECT x'01'")
    assert result.rows == [(bytes(48),)] and result.truncated
    assert "long values of the first row were cut" in result.truncation


def test_to_dict_is_json_ready(db):
    import json

    result = db.query(
        "SELECT * FROM AlertLogs ORDER BY id LIMIT 3".replace("AlertLogs", db.quote("AlertLogs"))
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["columns"] == ["id", "alertId", "userId", "triggeredAt"]
    assert data["rows"][1] == [2, 4, 5, "2022-12-13 17:48:56"]
    assert data["row_count"] == 3 and data["truncated"] is False


@pytest.mark.postgres
def test_to_dict_turns_postgres_types_into_json_scalars(postgres_dsn, open_db):
    db = open_db(postgres_dsn)
    data = db.query(
        "SELECT total, total * 0 AS zero, now()::date AS d FROM sales.invoices ORDER BY id"
    ).to_dict()
    assert data["rows"][0][0] == 12.5 and data["rows"][0][1] == 0
    assert isinstance(data["rows"][0][2], str)


@pytest.mark.postgres
def test_non_finite_numbers_and_json_values_survive_to_dict(postgres_dsn, open_db):
    db = open_db(postgres_dsn)
    sql = (
        "SELECT 'infinity'::numeric, '-infinity'::numeric, 'NaN'::numeric, 'Infinity'::float8, 'NaN'::float8, "
        """'{"a": true, "b": null}'::jsonb, ARRAY['x', 'y'], ARRAY[date '2024-01-02']"""
    )
    data = json.loads(json.dumps(db.query(sql).to_dict(), allow_nan=False))
    assert data["rows"] == [
        [
            "Infinity",
            "-Infinity",
            "NaN",
            "inf",
            "nan",
            '{"a": true, "b": null}',
            '["x", "y"]',
            '["2024-01-02"]',
        ]
    ]
    output = AgentToolbox(db).call("run_query", {"sql": sql})
    assert output.error is None
    assert output.text.splitlines()[1].endswith('| {"a": true, "b": null} | ["x", "y"] | ["2024-01-02"]')


def test_sqlite_infinities_stay_json_ready(sqlite_dsn, open_db):
    data = open_db(sqlite_dsn).query("SELECT 1e999, -1e999, 1.5").to_dict()
    assert json.loads(json.dumps(data, allow_nan=False))["rows"] == [["inf", "-inf", 1.5]]


def test_many_concurrent_calls_from_threads(dsn, engine, open_db, monkeypatch):
    """Threads' queries overlap in the engine (four run at one moment) and each gets its own answer."""
    db = open_db(dsn, timeout_s=5.0)
    in_flight = QueriesInFlight(db, monkeypatch, wanted=4)
    tools = AgentToolbox(db)

    def work(i: int) -> None:
        user = (i % 30) + 1
        assert db.query(f"SELECT name FROM users WHERE id = {user}").rows == [(f"User {user}",)]
        assert db.table("orders").name == "orders"
        output = tools.call(
            "run_query", {"sql": f"SELECT count(*) FROM orders WHERE customer_id = {user % 20 + 1}"}
        )
        assert output.error is None
        assert tools.call("join_path", {"table_a": "countries", "table_b": "orders"}).text.count("→") == 2
        assert list(db.stream(f"SELECT id FROM aler WHERE id = {db.placeholder}", ((i % 4) + 1,))) == [
            ((i % 4) + 1,)
        ]

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(work, range(160)))
    assert in_flight.most >= 4


def test_timeouts_in_some_threads_do_not_disturb_the_others(dsn, engine, open_db):
    db = open_db(dsn, timeout_s=5.0)

    def work(i: int) -> str:
        if i % 4 == 0:
            with pytest.raises(QueryTimeoutError):
                db.query(SLOW_QUERY[engine], timeout_s=0.3)
            return "cancelled"
        assert db.query("SELECT count(*) FROM order_items").rows[0][0] > 0
        return "ok"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(work, range(24)))
    assert outcomes.count("cancelled") == 6 and outcomes.count("ok") == 18


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT length(randomblob(200000000))",
        "SELECT length(replace(printf('%.*c', 20000000, 'x'), 'x', 'abc'))",
        "SELECT id FROM big_text WHERE length(zeroblob(id * 100000000)) > 0",
    ],
)
def test_sqlite_refuses_values_too_large_to_build_within_the_timeout(sqlite_dsn, open_db, sql):
    """The deadline is checked between instructions, never inside one call: a value's size is capped."""
    db = open_db(sqlite_dsn, timeout_s=5.0)
    with pytest.raises(QueryError, match="limited to 32 MiB each"):
        db.query(sql)
    assert db.query("SELECT length(zeroblob(1000000))").rows == [(1000000,)]
    assert len(list(db.stream("SELECT length(zeroblob(100000000))"))) == 1  # the program's own SQL: no cap


@pytest.mark.parametrize("timeout_s", [float("nan"), float("inf"), 0.0])
def test_a_timeout_that_never_expires_is_refused(sqlite_dsn, open_db, timeout_s):
    with pytest.raises(ValueError, match="must be positive"):
        open_db(sqlite_dsn, timeout_s=timeout_s)


@pytest.mark.parametrize(
    ("max_rows", "max_chars", "batch"),
    [(5, 10_000, 3), (5, 10_000, 256), (300, 10_000, 256), (300, 400, 256), (300, 400, 7), (3, 20, 256)],
)
def test_rows_added_by_batch_keep_what_one_by_one_keeps(max_rows, max_chars, batch):
    """ResultCaps.add_rows stops where add() does, with the same rows, lines and reason."""
    rows = [(i, f"name {i}", i / 3, None, b"\x01" if i % 7 else "x" * 30) for i in range(400)]
    one_by_one = ResultCaps(max_rows, max_chars)
    for row in rows:
        if not one_by_one.add(row):
            break
    by_batch = ResultCaps(max_rows, max_chars)
    for start in range(0, len(rows), batch):
        if not by_batch.add_rows(rows[start : start + batch]):
            break
    assert by_batch == one_by_one


def test_to_dict_of_plain_and_mixed_columns():
    rows = [(1, "a", 1.5, None, True), (2, None, float("inf"), 2.5, False), (3, "c", 2, b"\xff", None)]
    result = QueryResult("SELECT 1", list("abcde"), rows, 3, False, 1.0)
    assert result.to_dict()["rows"] == [
        [1, "a", 1.5, None, True],
        [2, None, "inf", 2.5, False],
        [3, "c", 2, "\\xff", None],
    ]
    plain = QueryResult("SELECT 1", ["a", "b"], [(1, "x"), (2, None)], 2, False, 1.0)
    assert plain.to_dict()["rows"] == [[1, "x"], [2, None]]


def test_to_dict_of_typed_columns_with_nulls():
    """A typed engine's columns (one Python type besides NULL) are converted a column at a time, as the cells
    one by one would be."""
    moment = datetime.datetime(2024, 5, 6, 7, 8, 9)
    key = uuid.UUID(int=7)
    rows = [
        (decimal.Decimal("12.50"), moment, key, decimal.Decimal(3), datetime.timedelta(hours=25)),
        (None, None, None, 4, None),
        (decimal.Decimal("NaN"), moment.date(), key, decimal.Decimal("1.5"), datetime.time(1, 2)),
    ]
    data = QueryResult("SELECT 1", list("abcde"), rows, 3, False, 1.0).to_dict()
    assert json.loads(json.dumps(data, allow_nan=False))["rows"] == [
        [12.5, "2024-05-06 07:08:09", str(key), 3, "1 day, 1:00:00"],
        [None, None, None, 4, None],
        ["NaN", "2024-05-06", str(key), 1.5, "01:02:00"],
    ]
    assert [row_text(row) for row in rows[:2]] == [
        f"12.50 | 2024-05-06 07:08:09 | {key} | 3 | 1 day, 1:00:00",
        "None | None | None | 4 | None",
    ]


def _cancel_from_outside(engine: str, dsn: str, marker: str, done: threading.Event) -> None:
    """Cancel the statement that names `marker` from another session, as an operator would (pg_cancel_backend or
    KILL QUERY), until the caller is done: a cancel that reaches a backend between statements is lost."""
    pattern = f"%{marker}%"
    if engine == "postgres":
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            cancel = (
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                "WHERE state = 'active' AND query LIKE %s AND pid <> pg_backend_pid()"
            )
            while not done.wait(0.1):
                conn.execute(cancel, (pattern,))
        return
    with mysql_connection(dsn) as conn, conn.cursor() as cursor:
        find = "SELECT id FROM information_schema.processlist WHERE info LIKE %s AND id <> connection_id()"
        while not done.wait(0.1):
            if cursor.execute(find, (pattern,)):
                cursor.execute(f"KILL QUERY {int(cursor.fetchone()[0])}")


@pytest.mark.parametrize("engine", ["postgres", "mysql"])
def test_a_query_cancelled_by_someone_else_is_not_called_a_timeout(engine, postgres_dsn, mysql_dsn, open_db):
    dsn = postgres_dsn if engine == "postgres" else mysql_dsn
    db = open_db(dsn, timeout_s=30)
    marker = f"cancel_{uuid.uuid4().hex}"
    done = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        cancelling = pool.submit(_cancel_from_outside, engine, dsn, marker, done)
        try:
            with pytest.raises(QueryError, match="cancelled on the server before the timeout") as cancelled:
                db.query(SLOW_QUERY[engine].replace("count(*)", f"count(*) AS {marker}", 1))
        finally:
            done.set()
        cancelling.result()
    assert not isinstance(cancelled.value, QueryTimeoutError)
    assert db.query("SELECT count(*) FROM users").rows == [(30,)]

"""Value search over a small demo database on every engine: match kinds, filters, counts, refresh."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from dbtools.demo import build_demo
from dbtools.demo.duckdb_file import load_duckdb
from dbtools.demo.mysql import load_mysql
from dbtools.demo.postgres import load_postgres
from dbtools.engines import open_database
from dbtools.errors import UnknownObjectError
from dbtools.value_search import ValueIndex
from dbtools.value_search.store import default_index_path
from tests.fixture_schema import ENGINES, mysql_connection


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory) -> Path:
    return build_demo(tmp_path_factory.mktemp("value-search") / "demo.sqlite", scale=0.1, progress=False).path


@pytest.fixture(scope="session")
def pg_demo_dsn(pg_server_dsn, small_demo) -> str:
    name = f"value_search_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    load_postgres(dsn, small_demo, progress=False)
    yield dsn
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mysql_demo_dsn(mariadb_server_dsn, small_demo) -> str:
    name = f"value_search_{uuid.uuid4().hex[:10]}"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    dsn = f"{mariadb_server_dsn}/{name}"
    load_mysql(dsn, small_demo, progress=False)
    yield dsn
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE `{name}`")


@pytest.fixture(scope="session")
def duckdb_demo_dsn(small_demo, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("value-search-duckdb") / "demo.duckdb"
    load_duckdb(path, small_demo, progress=False)
    return str(path)


@pytest.fixture(scope="session", params=ENGINES)
def index(request, small_demo, tmp_path_factory) -> ValueIndex:
    """A built value index of the small demo database, on each engine."""
    demo = {"sqlite": "small_demo", "postgres": "pg_demo_dsn", "mysql": "mysql_demo_dsn"}
    dsn = str(request.getfixturevalue(demo.get(request.param, f"{request.param}_demo_dsn")))
    db = open_database(dsn)
    value_index = ValueIndex(
        db, index_path=tmp_path_factory.mktemp("index") / "values.sqlite", progress=False
    )
    value_index.refresh()
    yield value_index
    db.close()


def _count(index: ValueIndex, table: str, column: str, value: str) -> int:
    db = index.db
    sql = f"SELECT count(*) FROM {db.quote(table)} WHERE {db.quote(column)} = {db.placeholder}"
    return next(db.stream(sql, (value,)))[0]


def test_exact_match_comes_first(index):
    matches = index.search("Germany")
    assert (matches[0].table, matches[0].column, matches[0].match_type) == ("countries", "name", "exact")
    assert matches[0].values == ["Germany"] and matches[0].score == 1.0
    # Grounding: the row's key that other tables hold, and the foreign keys that hold it.
    assert matches[0].row_keys["iso_code"] == "DE"
    links = matches[0].foreign_keys
    assert any(link.endswith(".country_code -> countries.iso_code") for link in links)
    assert links[-1] == "... and 9 more"  # 17 foreign keys point at countries; 8 are listed


def test_case_insensitive_match(index):
    top = index.search("gERMANY")[0]
    assert (top.table, top.column, top.match_type) == ("countries", "name", "case_insensitive")
    assert top.values == ["Germany"]


def test_codes_are_grounded_with_row_counts(index):
    matches = {(m.table, m.column): m for m in index.search("DE", limit=50)}
    customers = matches[("customers", "country_code")]
    assert customers.match_type == "exact"
    assert customers.foreign_keys[0] == "customers.country_code -> countries.iso_code"
    assert customers.row_keys == {}  # a code shared by many rows names no single row
    assert customers.matching_rows == _count(index, "customers", "country_code", "DE")


def test_partial_match_finds_values_containing_the_text(index):
    matches = index.search("frankfurt")
    city = next(m for m in matches if (m.table, m.column) == ("cities", "name"))
    assert city.match_type == "partial" and city.values == ["Frankfurt am Main"]


@pytest.mark.parametrize(
    ("typo", "table", "column", "value"),
    [
        ("Germny", "countries", "name", "Germany"),
        ("Frankfurt am Mian", "cities", "name", "Frankfurt am Main"),
        ("ovedue", "invoices", "inv_status", "overdue"),
    ],
)
def test_fuzzy_match_tolerates_typos(index, typo, table, column, value):
    matches = index.search(typo)
    hit = next(m for m in matches if (m.table, m.column) == (table, column))
    assert hit.match_type == "fuzzy" and hit.values[0] == value
    assert not index.search(typo, fuzzy=False, table=table)


def test_match_counts_agree_with_the_database(index):
    orders = index.search("delivered", table="orders", column="status")
    assert len(orders) == 1
    assert orders[0].matching_rows == _count(index, "orders", "status", "delivered")


def test_table_and_column_filters(index):
    only_customers = index.search("DE", table="CUSTOMERS", limit=50)
    assert only_customers and {m.table for m in only_customers} == {"customers"}
    only_column = index.search("DE", column="country_code", limit=50)
    assert len({m.table for m in only_column}) > 1 and {m.column for m in only_column} == {"country_code"}
    with pytest.raises(UnknownObjectError, match="customers"):
        index.search("DE", table="customer")


def test_an_unknown_column_names_the_close_ones_instead_of_matching_nothing(index):
    with pytest.raises(UnknownObjectError) as in_table:
        index.search("DE", table="customers", column="country_cod")
    assert str(in_table.value) == 'no column "country_cod" in table "customers"; closest: country_code'
    with pytest.raises(UnknownObjectError) as anywhere:
        index.search("DE", column="country_cod")
    assert str(anywhere.value).startswith('no column "country_cod" in any table; closest: country_code')
    assert {m.column for m in index.search("DE", table="customers", column="COUNTRY_CODE")} == {
        "country_code"
    }


def test_short_text_matches_prefixes(index):
    matches = index.search("Ge", table="countries")
    assert "Germany" in matches[0].values


def test_empty_text_is_refused(index):
    with pytest.raises(ValueError, match="non-empty"):
        index.search("   ")


def test_bounded_columns_are_marked_incomplete(small_demo, tmp_path):
    db = open_database(str(small_demo))
    bounded = ValueIndex(db, index_path=tmp_path / "bounded.sqlite", max_values_per_column=5, progress=False)
    top_name = next(
        db.stream("SELECT last_name FROM customers GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1")
    )[0]
    (hit,) = bounded.search(top_name, table="customers", column="last_name")
    assert hit.values[0] == top_name and not hit.complete
    # 48 country names occur once each: the five kept are the alphabetically first.
    assert not bounded.search("Germany", table="countries", fuzzy=False)
    (segment,) = bounded.search("Enterprise", table="customer_segments")
    assert segment.complete  # exactly five segments


def test_index_lives_in_the_cache_dir_and_never_writes_the_database(small_demo, tmp_path, monkeypatch):
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "readonly.sqlite"
    shutil.copy(small_demo, copy)
    before = hashlib.sha256(copy.read_bytes()).hexdigest(), copy.stat().st_mtime_ns
    db = open_database(str(copy))
    value_index = ValueIndex(db, progress=False)
    assert value_index.search("Germany")[0].table == "countries"
    assert value_index.path == default_index_path(db)
    assert value_index.path.is_relative_to(tmp_path / "cache")
    assert (hashlib.sha256(copy.read_bytes()).hexdigest(), copy.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "readonly.sqlite"]


def test_refresh_reindexes_after_a_change_and_not_without_one(small_demo, tmp_path):
    copy = tmp_path / "writable.sqlite"
    shutil.copy(small_demo, copy)
    db = open_database(str(copy))
    value_index = ValueIndex(db, index_path=tmp_path / "index.sqlite", progress=False)
    assert len(value_index.refresh().indexed) > 100
    assert value_index.refresh().indexed == []  # nothing changed
    assert not value_index.search("Zyxwvut", table="customers", fuzzy=False)
    with sqlite3.connect(copy) as conn:
        conn.execute(
            "INSERT INTO customers (first_name, last_name, country_code, segment_id, signup_date, is_active) "
            "VALUES ('Ada', 'Zyxwvut', 'DE', 1, '2024-01-01', 1)"
        )
    report = value_index.refresh()
    assert "customers" in report.indexed
    (hit,) = value_index.search("zyxwvut", table="customers")
    assert (hit.column, hit.values, hit.matching_rows) == ("last_name", ["Zyxwvut"], 1)


def test_refresh_waits_for_max_age(small_demo, tmp_path):
    copy = tmp_path / "aging.sqlite"
    shutil.copy(small_demo, copy)
    value_index = ValueIndex(
        open_database(str(copy)), index_path=tmp_path / "i.sqlite", max_age_s=3600, progress=False
    )
    value_index.search("Germany")  # first use builds
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE countries SET name = 'Deutschland' WHERE iso_code = 'DE'")
    assert value_index.search("Germany")[0].table == "countries"  # still the indexed state
    value_index.refresh()
    assert not [
        m for m in value_index.search("Germany") if m.table == "countries" and m.match_type == "exact"
    ]
    assert value_index.search("Deutschland")[0].values == ["Deutschland"]


@pytest.mark.postgres
def test_postgres_refresh_reindexes_only_the_changed_table(pg_demo_dsn, tmp_path):
    db = open_database(pg_demo_dsn)
    value_index = ValueIndex(db, index_path=tmp_path / "pg.sqlite", progress=False)
    value_index.refresh()
    before = db.fingerprint("tags")
    with psycopg.connect(pg_demo_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO tags (tag_id, tag_nm) VALUES (100000, 'qwertzuiop')")
    deadline = time.monotonic() + 10
    while db.fingerprint("tags") == before and time.monotonic() < deadline:
        time.sleep(0.2)  # table statistics reach the fingerprint asynchronously
    report = value_index.refresh()
    assert report.indexed == ["tags"]
    assert value_index.search("qwertzuiop")[0].table == "tags"
    db.close()


def test_concurrent_first_searches_build_the_index_once(small_demo, tmp_path):
    db = open_database(str(small_demo))
    value_index = ValueIndex(db, index_path=tmp_path / "shared.sqlite", progress=False)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: value_index.search("Germany")[0].table, range(4)))
    assert results == ["countries"] * 4
    with sqlite3.connect(value_index.path) as conn:
        per_column = conn.execute(
            "SELECT count(*), count(DISTINCT table_name || '.' || column_name) FROM indexed_columns"
        ).fetchone()
        assert per_column[0] == per_column[1]  # every column indexed once
        assert conn.execute("SELECT count(*) FROM vals WHERE value = 'Germany'").fetchone()[0] == 1


def test_typeless_columns_index_only_their_text(tmp_path):
    path = tmp_path / "mixed.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, payload, label TEXT)")
        conn.executemany(
            "INSERT INTO notes (payload, label) VALUES (?, ?)",
            [(b"\xff\xfe", "binary"), (42, "number"), ("Kilimanjaro", "text"), (None, None)],
        )
        conn.execute("CREATE TABLE broken (id INTEGER PRIMARY KEY, bad TEXT, good TEXT)")
        conn.execute("INSERT INTO broken (bad, good) VALUES (CAST(x'ff' AS TEXT), 'Serengeti')")
    value_index = ValueIndex(open_database(str(path)), index_path=tmp_path / "i.sqlite", progress=False)
    (hit,) = value_index.search("kilimanjaro")
    assert (hit.table, hit.column, hit.values, hit.matching_rows) == ("notes", "payload", ["Kilimanjaro"], 1)
    assert value_index.search("42") == []  # numbers are not text values
    assert [m.column for m in value_index.search("binary")] == ["label"]
    # A column that cannot be read (undecodable text) is skipped, not the whole index.
    assert [(m.table, m.column) for m in value_index.search("Serengeti")] == [("broken", "good")]

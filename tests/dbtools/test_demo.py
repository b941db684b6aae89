"""The demo database: its shape at the default scale, determinism, the cached default build, the PostgreSQL load."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import uuid
from pathlib import Path

import duckdb
import psycopg
import pytest

from dbtools.demo import GENERATOR_VERSION, build_demo, default_demo_path
from dbtools.demo.__main__ import build_parser as demo_parser
from dbtools.demo.__main__ import main as demo_main
from dbtools.demo.domains import DOMAINS, TABLES
from tests.fixture_schema import mysql_connection
from tests.usage_errors import usage_error


@pytest.fixture(scope="session")
def demo(demo_database) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{demo_database}?mode=ro", uri=True)
    yield conn
    conn.close()


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]


def _row_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in _tables(conn)}


def _content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        for table in sorted(_tables(conn)):
            digest.update(table.encode())
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid'):
                digest.update(repr(row).encode())
    return digest.hexdigest()


# Slow (left out of the fast tier): the full demo database.
@pytest.mark.slow
def test_default_demo_is_cached_by_generator_version(demo_database, run_cache_dir, monkeypatch):
    """demo_database is the run's default_demo_path(), built on first use."""
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(run_cache_dir))
    path = demo_database
    assert path.parent == run_cache_dir and f"v{GENERATOR_VERSION}" in path.name
    stamp = path.stat().st_mtime_ns
    assert default_demo_path() == path and path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert [p.name for p in run_cache_dir.glob("demo-*")] == [path.name]  # no temporary build left behind
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == GENERATOR_VERSION


# Slow (left out of the fast tier): the full demo database.
@pytest.mark.slow
def test_demo_has_many_tables_and_rows(demo):
    counts = _row_counts(demo)
    assert len(counts) >= 120
    assert sum(counts.values()) >= 300_000
    empty = [t for t, n in counts.items() if n == 0]
    assert 3 <= len(empty) <= 15


# Slow (left out of the fast tier): the full demo database.
@pytest.mark.slow
def test_every_foreign_key_resolves(demo):
    total = 0
    referencing_tables = set()
    for table in _tables(demo):
        for _, _, parent, column, parent_column, *_ in demo.execute(f'PRAGMA foreign_key_list("{table}")'):
            total += 1
            referencing_tables.add(table)
            orphans = demo.execute(
                f'SELECT count(*) FROM "{table}" c WHERE c."{column}" IS NOT NULL AND NOT EXISTS '
                f'(SELECT 1 FROM "{parent}" p WHERE p."{parent_column}" = c."{column}")'
            ).fetchone()[0]
            assert orphans == 0, f"{table}.{column} -> {parent}.{parent_column}: {orphans} orphans"
    assert total >= 200
    assert len(referencing_tables) >= 0.8 * len(_tables(demo))


def test_domains_declare_each_table_once_and_parents_before_children():
    created: set[str] = set()
    for domain in DOMAINS:
        for table in domain.TABLES:
            assert table.name not in created, f"{domain.__name__}: {table.name} is declared twice"
            for column in table.foreign_keys:
                assert column.ref_table in created | {table.name}, (
                    f"{domain.__name__}: {table.name}.{column.name} refers to {column.ref_table}, created later"
                )
            created.add(table.name)
    assert len(created) == len(TABLES)


# Slow (left out of the fast tier): the full demo database.
@pytest.mark.slow
def test_demo_has_nulls_skew_and_grounding_values(demo):
    nulls = demo.execute("SELECT count(*) FROM customers WHERE email IS NULL").fetchone()[0]
    assert nulls > 0
    # Fact tables are skewed: the busiest customer has far more orders than the median one.
    counts = [r[0] for r in demo.execute("SELECT count(*) FROM orders GROUP BY customer_id ORDER BY 1 DESC")]
    assert counts[0] > 20 * counts[len(counts) // 2]
    assert demo.execute("SELECT name FROM countries WHERE iso_code = 'DE'").fetchone() == ("Germany",)
    assert demo.execute("SELECT count(*) FROM customers WHERE country_code = 'DE'").fetchone()[0] > 0


# Slow (left out of the fast tier): the full demo database.
@pytest.mark.slow
def test_create_table_text_mixes_real_styles(demo):
    sql = dict(demo.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
    assert "FOREIGN KEY (alertId) REFERENCES alertRules(id)" in sql["AlertLogs"]
    assert "REFERENCES customers (id)" in sql["orders"]
    assert "cust_id integer not null" in sql["cust_addr"]  # abbreviated names, lower-case types
    assert 'CONSTRAINT "FK_Employees_ManagerID" FOREIGN KEY' in sql["Employees"]
    names = _tables(demo)
    assert any("_" in n for n in names) and any(re.search(r"[a-z][A-Z]", n) for n in names)


def test_same_seed_gives_identical_content(tmp_path):
    first, second, other = (tmp_path / f"{n}.sqlite" for n in ("a", "b", "c"))
    build_demo(first, scale=0.02, seed=7, progress=False)
    build_demo(second, scale=0.02, seed=7, progress=False)
    build_demo(other, scale=0.02, seed=8, progress=False)
    assert _content_hash(first) == _content_hash(second)
    assert _content_hash(first) != _content_hash(other)


def test_scale_multiplies_rows_but_keeps_reference_data(tmp_path):
    small = build_demo(tmp_path / "small.sqlite", scale=0.02, seed=0, progress=False)
    larger = build_demo(tmp_path / "larger.sqlite", scale=0.04, seed=0, progress=False)
    assert larger.rows > small.rows
    with sqlite3.connect(small.path) as a, sqlite3.connect(larger.path) as b:
        assert _row_counts(a)["countries"] == _row_counts(b)["countries"]
        assert _row_counts(b)["order_items"] == 2 * _row_counts(a)["order_items"]


def test_build_command_writes_the_requested_file(tmp_path, capsys):
    out = tmp_path / "cli.sqlite"
    assert demo_main(["build", "--out", str(out), "--scale", "0.02", "--seed", "3"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    with sqlite3.connect(out) as conn:
        assert len(_tables(conn)) == len(TABLES)


def test_build_command_rejects_bad_settings_in_one_line(tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "x.sqlite")
    with pytest.raises(SystemExit) as exit_info:
        demo_main(["build", "--out", out, "--scale", "-1"])
    assert exit_info.value.code == 2 and "--scale: must be positive: '-1'" in capsys.readouterr().err
    monkeypatch.setenv("SQLSCOUT_DEMO_SCALE", "big")
    with pytest.raises(SystemExit) as exit_info:
        demo_main(["build", "--out", out])
    assert exit_info.value.code == 2 and "--scale: not a number: 'big'" in capsys.readouterr().err
    monkeypatch.delenv("SQLSCOUT_DEMO_SCALE")
    missing = str(tmp_path / "absent" / "x.sqlite")
    assert demo_main(["build", "--out", missing, "--scale", "0.01"]) == 1
    assert f"error: cannot write {missing}: unable to open database file" in capsys.readouterr().err


def test_demo_variables_set_the_options_and_flags_win(monkeypatch):
    monkeypatch.setenv("SQLSCOUT_DEMO_OUT", "demo.sqlite")
    monkeypatch.setenv("SQLSCOUT_DEMO_SCALE", "2")
    monkeypatch.setenv("SQLSCOUT_DEMO_SEED", "5")
    args = demo_parser().parse_args(["build"])
    assert (args.out, args.scale, args.seed) == ("demo.sqlite", 2.0, 5)
    assert demo_parser().parse_args(["build", "--seed", "3"]).seed == 3
    monkeypatch.setenv("SQLSCOUT_DEMO_PG_DSN", "postgresql://db/demo")
    monkeypatch.setenv("SQLSCOUT_DEMO_SOURCE", "demo.sqlite")
    monkeypatch.setenv("SQLSCOUT_DEMO_REPLACE", "1")
    args = demo_parser().parse_args(["load-postgres"])
    assert (args.dsn_option, args.source, args.replace) == ("postgresql://db/demo", "demo.sqlite", True)
    assert demo_parser().parse_args(["load-postgres", "--dsn", "postgresql://db/other"]).dsn_option == (
        "postgresql://db/other"
    )
    monkeypatch.setenv("SQLSCOUT_DEMO_REPLACE", "0")
    assert not demo_parser().parse_args(["load-postgres"]).replace


@pytest.mark.parametrize(
    ("command", "variable", "value", "message"),
    [
        ("build", "SQLSCOUT_DEMO_SEED", "x", "argument --seed: invalid int value: 'x'"),
        (
            "load-postgres",
            "SQLSCOUT_DEMO_REPLACE",
            "maybe",
            "Unexpected value for SQLSCOUT_DEMO_REPLACE: 'maybe'",
        ),
    ],
)
def test_a_bad_demo_variable_is_a_usage_error_naming_the_option(
    command, variable, value, message, monkeypatch, capsys
):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: demo_main([command]), capsys)


def test_load_postgres_refuses_a_source_of_another_version(tmp_path, capsys):
    stale = tmp_path / "stale.sqlite"
    with sqlite3.connect(stale) as conn:
        conn.execute("PRAGMA user_version = 0")
    assert demo_main(["load-postgres", "postgresql://127.0.0.1:1/none", "--source", str(stale)]) == 1
    assert "rebuild it" in capsys.readouterr().err


# Slow (left out of the fast tier): loads the demo into PostgreSQL twice.
@pytest.mark.slow
@pytest.mark.postgres
def test_load_postgres_copies_every_table(pg_server_dsn, tmp_path):
    source = build_demo(tmp_path / "small.sqlite", scale=0.02, seed=0, progress=False).path
    name = f"demo_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    try:
        assert demo_main(["load-postgres", dsn, "--source", str(source)]) == 0
        with sqlite3.connect(source) as lite:
            expected = _row_counts(lite)
            expected_fks = _foreign_key_count(lite, expected)
        with psycopg.connect(dsn) as conn:
            loaded = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in expected}
            fks = conn.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f'").fetchone()[0]
            comment = conn.execute("SELECT obj_description('countries'::regclass, 'pg_class')").fetchone()[0]
            germany = conn.execute("SELECT name FROM countries WHERE iso_code = 'DE'").fetchone()
        assert loaded == expected
        assert fks == expected_fks
        assert comment and germany == ("Germany",)
        # A second load into the same database needs --replace.
        assert demo_main(["load-postgres", dsn, "--source", str(source)]) == 1
        assert demo_main(["load-postgres", dsn, "--source", str(source), "--replace"]) == 0
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


# Slow (left out of the fast tier): loads the demo into MariaDB twice.
@pytest.mark.slow
@pytest.mark.mysql
def test_load_mysql_copies_every_table(mariadb_server_dsn, tmp_path):
    source = build_demo(tmp_path / "small.sqlite", scale=0.02, seed=0, progress=False).path
    name = f"demo_load_{uuid.uuid4().hex[:10]}"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    dsn = f"{mariadb_server_dsn}/{name}"
    try:
        assert demo_main(["load-mysql", dsn, "--source", str(source)]) == 0
        with sqlite3.connect(source) as lite:
            expected = _row_counts(lite)
            expected_fks = _foreign_key_count(lite, expected)
        with mysql_connection(dsn) as conn, conn.cursor() as cursor:
            loaded = {}
            for table in expected:
                cursor.execute(f"SELECT count(*) FROM `{table}`")
                loaded[table] = cursor.fetchone()[0]
            cursor.execute(
                "SELECT count(*) FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE()"
            )
            fks = cursor.fetchone()[0]
            cursor.execute("SELECT name FROM countries WHERE iso_code = 'DE'")
            germany = cursor.fetchone()
        assert loaded == expected
        assert fks == expected_fks
        assert germany == ("Germany",)
        assert demo_main(["load-mysql", dsn, "--source", str(source)]) == 1
        assert demo_main(["load-mysql", dsn, "--source", str(source), "--replace"]) == 0
    finally:
        with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")


# Slow (left out of the fast tier): loads the demo into DuckDB twice.
@pytest.mark.slow
def test_load_duckdb_copies_every_table(tmp_path):
    """Every row and foreign key but a table's references to its own rows, which DuckDB cannot declare."""
    source = build_demo(tmp_path / "small.sqlite", scale=0.02, seed=0, progress=False).path
    target = tmp_path / "demo.duckdb"
    assert demo_main(["load-duckdb", str(target), "--source", str(source)]) == 0
    with sqlite3.connect(source) as lite:
        expected = _row_counts(lite)
        expected_fks = _foreign_key_count(lite, expected)
    with duckdb.connect(str(target), read_only=True) as conn:
        loaded = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in expected}
        fks = conn.execute("SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'FOREIGN KEY'")
        fks = fks.fetchone()[0]
        comment = conn.execute(
            "SELECT comment FROM duckdb_tables() WHERE table_name = 'countries'"
        ).fetchone()[0]
        germany = conn.execute("SELECT name FROM countries WHERE iso_code = 'DE'").fetchone()
        empty = conn.execute("SELECT count(*) FROM countries WHERE name IS NULL OR name = ''").fetchone()[0]
    assert loaded == expected
    assert fks == expected_fks - 2  # Employees.ManagerID and gl_accts.parent_acct_id
    assert comment and germany == ("Germany",) and empty == 0
    assert demo_main(["load-duckdb", str(target), "--source", str(source)]) == 1
    assert demo_main(["load-duckdb", str(target), "--source", str(source), "--replace"]) == 0


def _foreign_key_count(lite: sqlite3.Connection, tables: dict[str, int]) -> int:
    return sum(len(lite.execute(f'PRAGMA foreign_key_list("{t}")').fetchall()) for t in tables)


def test_load_postgres_reports_an_unreachable_server(tmp_path, capsys):
    source = build_demo(tmp_path / "tiny.sqlite", scale=0.01, seed=0, progress=False).path
    assert (
        demo_main(["load-postgres", "postgresql://postgres@127.0.0.1:1/none", "--source", str(source)]) == 1
    )
    assert "error: PostgreSQL: connection failed" in capsys.readouterr().err


def test_load_mysql_reports_an_unreachable_server(tmp_path, capsys):
    source = build_demo(tmp_path / "tiny.sqlite", scale=0.01, seed=0, progress=False).path
    assert demo_main(["load-mysql", "mysql://root@127.0.0.1:1/none", "--source", str(source)]) == 1
    assert "error: MySQL: Can't connect to MySQL server on '127.0.0.1'" in capsys.readouterr().err


def test_an_unusable_cache_directory_is_reported_in_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    assert demo_main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot create the cache directory") and "SQLSCOUT_CACHE_DIR" in err

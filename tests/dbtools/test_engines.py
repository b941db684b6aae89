"""Opening databases by DSN, the catalog both engines report, quoting, fingerprints and connection errors."""

from __future__ import annotations

import sqlite3
import time

import psycopg
import pytest

from dbtools.engines import ColumnInfo, ForeignKey, PostgresDatabase, SQLiteDatabase, open_database
from dbtools.engines.dsn import parse_dsn
from dbtools.engines.duckdb_engine import DuckDBDatabase
from dbtools.engines.mysql import MySQLDatabase
from dbtools.engines.mysql_pool import connect_args
from dbtools.errors import ConnectionFailedError, QueryError, UnknownObjectError
from tests.fixture_schema import COMMON_TABLES, build_sqlite


@pytest.mark.parametrize(
    ("dsn", "engine", "target"),
    [
        ("data/shop.sqlite", "sqlite", "data/shop.sqlite"),
        ("sqlite:///data/shop.sqlite", "sqlite", "data/shop.sqlite"),
        ("sqlite:////abs/shop.db", "sqlite", "/abs/shop.db"),
        ("postgresql://u@h:5432/db", "postgres", "postgresql://u@h:5432/db"),
        ("postgres://u@h/db", "postgres", "postgres://u@h/db"),
        ("host=h dbname=db user=u", "postgres", "host=h dbname=db user=u"),
        ("mysql://u:p@h:3306/db", "mysql", "mysql://u:p@h:3306/db"),
        ("mariadb://u@h/db", "mysql", "mariadb://u@h/db"),
        ("duckdb:///data/shop.duckdb", "duckdb", "data/shop.duckdb"),
        ("duckdb:////abs/shop.duckdb", "duckdb", "/abs/shop.duckdb"),
        ("data/shop.duckdb", "duckdb", "data/shop.duckdb"),
        ("sales.parquet", "duckdb", "sales.parquet"),
        ("data/sales.csv.gz", "duckdb", "data/sales.csv.gz"),
        ("events.jsonl", "duckdb", "events.jsonl"),
    ],
)
def test_parse_dsn_tells_the_engines_apart(dsn, engine, target):
    parsed = parse_dsn(dsn)
    assert (parsed.engine, parsed.target) == (engine, target)


def test_a_folder_of_data_files_is_duckdb_and_any_other_folder_sqlite(tmp_path):
    (tmp_path / "notes.txt").touch()
    assert parse_dsn(str(tmp_path)).engine == "sqlite"  # which then says it is a folder, not a database
    (tmp_path / "sales.csv").touch()
    assert parse_dsn(str(tmp_path)).engine == "duckdb"


def test_parse_dsn_masks_passwords():
    assert parse_dsn("postgresql://u:s3cret@h:5432/db").display_name == "postgresql://u:***@h:5432/db"
    assert "s3cret" not in parse_dsn("host=h password=s3cret dbname=db").display_name
    assert parse_dsn("mysql://u:s3cret@h/db").display_name == "mysql://u:***@h/db"


@pytest.mark.parametrize("dsn", ["oracle://u@h/db", "", "sqlite://host/x.db", "sqlite:///", "duckdb://h/x"])
def test_parse_dsn_rejects_what_it_cannot_open(dsn):
    with pytest.raises(ConnectionFailedError):
        parse_dsn(dsn)


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("mysql://u@127.0.0.1:1", "name one database in the DSN: mysql://user@host:3306/database"),
        ("mysql://u@127.0.0.1:1/db?ssl-mode=maybe", "unknown ssl-mode 'maybe'"),
        ("mysql://u@127.0.0.1:1/db?compress=1", "unknown DSN option 'compress'"),
    ],
)
def test_mysql_dsns_that_cannot_work_are_named(dsn, message):
    with pytest.raises(ConnectionFailedError, match=message):
        open_database(dsn)


def test_mysql_dsn_options_become_connection_arguments():
    args = connect_args("mysql://ana:p%40ss@db.example:3307/sales?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem", 4)
    assert (args["host"], args["port"], args["user"], args["password"], args["database"]) == (
        "db.example",
        3307,
        "ana",
        "p@ss",
        "sales",
    )
    assert args["ssl"] == {"ca": "/ca.pem", "verify_mode": True, "check_hostname": True}
    assert args["connect_timeout"] == 4 and args["charset"] == "utf8mb4"
    assert connect_args("mariadb://u@h/db?ssl-mode=disabled", 5)["ssl_disabled"] is True
    assert "ssl" not in connect_args("mysql://u@h/db", 5)  # preferred: TLS when the server offers it
    assert connect_args("mysql://u@/db?unix_socket=/run/mysqld/mysqld.sock", 5)["unix_socket"] == (
        "/run/mysqld/mysqld.sock"
    )


ENGINE_CLASSES = {
    "sqlite": SQLiteDatabase,
    "postgres": PostgresDatabase,
    "mysql": MySQLDatabase,
    "duckdb": DuckDBDatabase,
}


def test_open_database_picks_the_engine(dsn, engine, open_db):
    db = open_db(dsn)
    assert isinstance(db, ENGINE_CLASSES[engine])
    assert db.dialect == engine


def test_no_dsn_opens_the_bundled_demo_database(sqlite_dsn, monkeypatch, open_db):
    import dbtools.demo

    monkeypatch.setattr(dbtools.demo, "default_demo_path", lambda: sqlite_dsn)
    db = open_db(None)
    assert isinstance(db, SQLiteDatabase) and str(db.path) == sqlite_dsn


def test_tables_report_columns_keys_and_foreign_keys(db, engine):
    tables = {t.name: t for t in db.tables()}
    assert set(COMMON_TABLES) <= set(tables)
    users = tables["users"]
    assert [c.name for c in users.columns] == ["id", "name", "email"]
    assert users.columns[0].primary_key and not users.columns[0].nullable
    assert not users.columns[1].nullable and users.columns[2].nullable
    assert users.columns[1].type.lower() == ("varchar" if engine == "duckdb" else "text")  # DuckDB's TEXT
    items = tables["order_items"]
    assert [c.name for c in items.columns if c.primary_key] == ["order_id", "product_id"]
    assert items.foreign_keys == (
        ForeignKey(("order_id",), "orders", ("id",)),
        ForeignKey(("product_id",), "products", ("id",)),
    )
    assert tables["AlertLogs"].foreign_keys == (
        ForeignKey(("alertId",), "aler", ("id",)),
        ForeignKey(("userId",), "users", ("id",)),
    )
    assert tables["customers"].foreign_keys == (ForeignKey(("country_code",), "countries", ("code",)),)


@pytest.mark.postgres
def test_postgres_reports_every_schema_comments_and_estimates(postgres_dsn, open_db):
    db = open_db(postgres_dsn)
    tables = {t.name: t for t in db.tables()}
    assert "sales.invoices" in tables
    assert tables["sales.invoices"].foreign_keys == (ForeignKey(("order_id",), "orders", ("id",)),)
    customers = tables["customers"]
    assert customers.comment == "People and companies who order"
    assert customers.columns[2] == ColumnInfo("country_code", "text", True, False, "ISO 3166 alpha-2 code")
    assert tables["users"].row_estimate == 30  # ANALYZE ran when the fixture was built


def test_table_lookup_is_case_insensitive_and_names_close_matches(db):
    assert db.table("alertlogs").name == "AlertLogs"
    assert db.table('"AlertLogs"').name == "AlertLogs"
    assert db.table("ORDER_ITEMS").name == "order_items"
    with pytest.raises(UnknownObjectError, match='no table named "custmers"; closest: customers'):
        db.table("custmers")
    with pytest.raises(UnknownObjectError, match="closest: .*order_items"):
        db.table("orderitems")
    with pytest.raises(UnknownObjectError, match='no column "nmae" in table "users"; closest: name'):
        db.table("users").column("nmae")


@pytest.mark.postgres
def test_postgres_accepts_public_qualified_names(postgres_dsn, open_db):
    db = open_db(postgres_dsn)
    assert db.table("public.users").name == "users"
    assert db.table("SALES.Invoices").name == "sales.invoices"


def test_quote_handles_spaces_quotes_keywords_and_schemas(db, engine):
    if engine == "mysql":
        assert db.quote("weird name") == "`weird name`"
        assert db.quote("a`b") == "`a``b`"
        assert db.quote("select") == "`select`"
        return
    assert db.quote("weird name") == '"weird name"'
    assert db.quote('a"b') == '"a""b"'
    assert db.quote("select") == '"select"'
    if engine == "postgres":
        assert db.quote("sales.invoices") == '"sales"."invoices"'


def test_fingerprint_changes_when_rows_change(tmp_path, open_db):
    path = tmp_path / "live.sqlite"
    build_sqlite(str(path))
    db = open_db(str(path))
    before = db.fingerprint("users")
    assert db.fingerprint("users") == before
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE users SET name = 'changed' WHERE id = 1")
    after_update = db.fingerprint("users")
    assert after_update != before
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO users VALUES (99, 'new', NULL)")
    assert db.fingerprint("users") not in (before, after_update)


def test_catalog_follows_schema_changes(tmp_path, open_db):
    path = tmp_path / "live.sqlite"
    build_sqlite(str(path))
    db = open_db(str(path))
    assert "late_table" not in {t.name for t in db.tables()}
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE late_table (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id))")
    assert db.table("late_table").foreign_keys == (ForeignKey(("user_id",), "users", ("id",)),)


# Slow (left out of the fast tier): waits out the schema check's interval.
@pytest.mark.slow
def test_a_schema_check_is_reused_for_the_engines_interval(tmp_path, open_db, monkeypatch):
    path = tmp_path / "checked.sqlite"
    build_sqlite(str(path))
    db = open_db(str(path))
    reads = []
    read_marker = db._schema_marker
    monkeypatch.setattr(db, "_schema_marker", lambda: reads.append(1) or read_marker())
    db.tables(), db.tables()
    assert len(reads) == 2, "SQLite's check is cheap: every call makes it"
    monkeypatch.setattr(db, "schema_check_interval_s", 1.5)
    db.tables(), db.tables(), db.table("users")
    assert len(reads) == 2, "within the interval the last check stands"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE late_table (id INTEGER PRIMARY KEY)")
    assert "late_table" not in {t.name for t in db.tables()}
    time.sleep(1.6)
    assert "late_table" in {t.name for t in db.tables()} and len(reads) == 3


@pytest.mark.postgres
def test_postgres_catalog_and_fingerprint_follow_changes(postgres_dsn, open_db):
    db = open_db(postgres_dsn)
    before = db.fingerprint("products")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE late_table (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO products SELECT g, 'extra', 1 FROM generate_series(1000, 3000) g")
    try:
        # The schema check is reused for a while: the new table shows once it has run again.
        assert db.schema_check_interval_s <= 5
        deadline = time.monotonic() + db.schema_check_interval_s + 5
        while "late_table" not in {t.name for t in db.tables()} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert db.table("late_table").name == "late_table"
        deadline = time.monotonic() + 10
        while db.fingerprint("products") == before and time.monotonic() < deadline:
            time.sleep(0.2)  # statistics reach other sessions asynchronously
        assert db.fingerprint("products") != before
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE late_table")
            conn.execute("DELETE FROM products WHERE id >= 1000")


def test_missing_or_broken_sqlite_files_fail_clearly(tmp_path):
    with pytest.raises(ConnectionFailedError, match="no SQLite database at"):
        open_database(str(tmp_path / "missing.sqlite"))
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database file" * 100)
    with pytest.raises(ConnectionFailedError, match="cannot read .* as a SQLite database"):
        open_database(str(junk))


def test_a_sqlite_url_with_three_slashes_explains_relative_and_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop.sqlite").touch()
    absolute = tmp_path / "shop.sqlite"
    with pytest.raises(ConnectionFailedError) as meant_absolute:
        open_database(f"sqlite://{absolute}")  # sqlite:///tmp/... : relative to the current directory
    assert str(meant_absolute.value) == (
        f"no SQLite database at {tmp_path}{absolute}: in a sqlite: URL three slashes start a path relative to "
        f"the current directory and four an absolute one; did you mean sqlite:///{absolute} ({absolute} exists)?"
    )
    with pytest.raises(ConnectionFailedError) as nowhere:
        open_database("sqlite:///nowhere/x.sqlite")
    assert "three slashes start a path relative to the current directory and four an absolute one" in str(
        nowhere.value
    )
    assert str(nowhere.value).endswith("write sqlite:////nowhere/x.sqlite for /nowhere/x.sqlite")
    assert open_database("sqlite:///shop.sqlite").path == absolute


def test_a_folder_given_as_the_database_is_named_as_a_folder(tmp_path):
    (tmp_path / "shop.sqlite").touch()
    for dsn in (str(tmp_path), f"sqlite:///{tmp_path}"):
        with pytest.raises(ConnectionFailedError) as refused:
            open_database(dsn)
        assert str(refused.value) == (
            f"{tmp_path} is a folder, not a SQLite database: give the database file's path in --dsn "
            "(it holds shop.sqlite)"
        )


# Slow (left out of the fast tier): waits out a query timeout.
@pytest.mark.slow
def test_a_sqlite_file_locked_by_a_writer_is_a_clear_error_within_the_timeout(tmp_path, open_db):
    path = tmp_path / "locked.sqlite"
    build_sqlite(str(path))
    db = open_db(str(path), timeout_s=0.5)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        for call in (db.tables, lambda: db.query("SELECT count(*) FROM users")):
            started = time.perf_counter()
            with pytest.raises(QueryError, match="another process is writing to locked.sqlite; retry"):
                call()
            assert time.perf_counter() - started < 0.5 + 3.0  # not sqlite3's own five-second wait
        with pytest.raises(ConnectionFailedError, match="another process is writing to it; retry"):
            open_db(str(path), timeout_s=0.5)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert db.query("SELECT count(*) FROM users").rows == [(30,)]


def test_unreachable_server_is_one_clear_error(open_db):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    with pytest.raises(
        ConnectionFailedError, match=f"cannot connect to postgresql://u:\\*\\*\\*@127.0.0.1:{port}/db"
    ):
        open_db(f"postgresql://u:pw@127.0.0.1:{port}/db")


@pytest.mark.postgres
def test_bad_credentials_and_unknown_database_are_clear_errors(pg_server_dsn):
    server = pg_server_dsn.rsplit("@", 1)[1].rsplit("/", 1)[0]
    with pytest.raises(ConnectionFailedError, match='role "nobody" does not exist'):
        open_database(f"postgresql://nobody:wrong@{server}/postgres")
    with pytest.raises(ConnectionFailedError, match='database "no_such_db" does not exist'):
        open_database(f"postgresql://postgres@{server}/no_such_db")


@pytest.mark.postgres
def test_a_select_only_role_sees_only_what_it_may_read(postgres_dsn, monkeypatch, open_db):
    """The real boundary is the role: granted tables are listed and readable, the server's files are not."""
    import uuid

    import dbtools.engines.database

    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        db = open_db(postgres_dsn.replace("postgres@", f"{role}@", 1))
        names = {t.name for t in db.tables()}
        assert "users" in names and "sales.invoices" not in names
        assert db.query("SELECT count(*) FROM users").rows == [(30,)]
        monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
        with pytest.raises(QueryError, match="permission denied"):
            db.query("SELECT pg_read_file('/etc/hostname')")
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")

"""What only MySQL and MariaDB need: connection errors, the privilege warning, a SELECT-only account, catalog
changes, fingerprints, and connections that the server drops or a timeout kills."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

import dbtools.engines.database
import dbtools.engines.mysql
from dbtools.engines import open_database
from dbtools.errors import ConnectionFailedError, QueryError, QueryTimeoutError
from tests.fixture_schema import mysql_connection

pytestmark = pytest.mark.mysql


def test_bad_credentials_and_unknown_database_are_clear_errors(mariadb_server_dsn):
    server = mariadb_server_dsn.split("@", 1)[1]
    with pytest.raises(
        ConnectionFailedError, match=r"cannot connect to mysql://nobody:\*\*\*@.*Access denied"
    ):
        open_database(f"mysql://nobody:wrong@{server}/mysql")
    with pytest.raises(ConnectionFailedError, match="Unknown database 'no_such_db'"):
        open_database(f"mysql://root@{server}/no_such_db")


def test_an_unreachable_server_is_one_clear_error():
    with pytest.raises(
        ConnectionFailedError, match=r"cannot connect to mysql://u:\*\*\*@127.0.0.1:1/db: Can't"
    ):
        open_database("mysql://u:pw@127.0.0.1:1/db", connect_timeout_s=2)


def test_an_account_with_more_than_select_is_warned_about(mysql_dsn, caplog, open_db):
    with caplog.at_level(logging.WARNING, logger="dbtools.engines.mysql"):
        open_db(mysql_dsn)
    assert "privileges beyond SELECT (ALL PRIVILEGES" in caplog.text


def test_a_select_only_account_sees_only_what_it_may_read_and_is_not_warned_about(
    mysql_dsn, caplog, monkeypatch, open_db
):
    account, password = f"reader_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    database = mysql_dsn.rsplit("/", 1)[1]
    with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE USER '{account}'@'%' IDENTIFIED BY '{password}'")
        for table in ("users", "orders"):
            cursor.execute(f"GRANT SELECT ON `{database}`.`{table}` TO '{account}'@'%'")
    try:
        with caplog.at_level(logging.WARNING, logger="dbtools.engines.mysql"):
            db = open_db(f"mysql://{account}:{password}@{mysql_dsn.split('@', 1)[1]}")
        assert "privileges beyond SELECT" not in caplog.text
        assert {t.name for t in db.tables()} == {"users", "orders"}
        assert db.query("SELECT count(*) FROM users").rows == [(30,)]
        monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
        with pytest.raises(QueryError, match="command denied"):
            db.query("SELECT count(*) FROM customers")
    finally:
        with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP USER '{account}'@'%'")


def test_catalog_and_fingerprint_follow_changes(mysql_dsn, monkeypatch, open_db):
    db = open_db(mysql_dsn)
    monkeypatch.setattr(db, "schema_check_interval_s", 0.0)
    before = db.fingerprint("products")
    assert "late_table" not in {t.name for t in db.tables()}
    with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE late_table (id INT PRIMARY KEY, product_id INT REFERENCES products(id))")
        cursor.execute("INSERT INTO products VALUES (1000, 'extra', 1)")
    try:
        assert db.table("LATE_TABLE").foreign_keys[0].ref_table == "products"
        deadline = time.monotonic() + 10
        while db.fingerprint("products") == before and time.monotonic() < deadline:
            time.sleep(0.2)  # InnoDB's update time reaches the catalog at commit
        assert db.fingerprint("products") != before
    finally:
        with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
            cursor.execute("DROP TABLE late_table")
            cursor.execute("DELETE FROM products WHERE id = 1000")


def test_a_connection_the_server_ends_is_replaced_on_the_next_call(mysql_dsn, open_db):
    db = open_db(mysql_dsn, timeout_s=5.0)
    [(pooled,)] = list(db.stream("SELECT CONNECTION_ID()"))  # the program's own SQL: queries may not ask
    with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(f"KILL CONNECTION {pooled}")
    [(replacement,)] = list(db.stream("SELECT CONNECTION_ID()"))
    assert replacement != pooled


def test_a_statement_past_its_timeout_is_killed_and_its_connection_dropped(mysql_dsn, monkeypatch, open_db):
    """SLEEP() ends early without an error when the server's limit stops it: the elapsed time still counts as
    the timeout, and the server shows no statement left running."""
    db = open_db(mysql_dsn, timeout_s=0.5)
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    started = time.perf_counter()
    with pytest.raises(QueryTimeoutError):
        db.query("SELECT SLEEP(30)")
    assert time.perf_counter() - started < 3.0
    with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(30)%'"
        )
        assert cursor.fetchone() == (0,)
    assert db.query("SELECT 1").rows == [(1,)]

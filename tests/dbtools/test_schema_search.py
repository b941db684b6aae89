"""Schema search: name splitting, abbreviations and stems, ranking of tables and columns, comments."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from dbtools.engines import open_database
from dbtools.schema_search import search_schema, split_words, stem, terms

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, first_name TEXT, email TEXT);
CREATE TABLE cust_addr (addr_id INTEGER PRIMARY KEY, cust_id INTEGER REFERENCES customers(id), street TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), order_date DATE,
                     status TEXT);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id), qty INTEGER);
CREATE TABLE ShipmentTracking (TrackingID INTEGER PRIMARY KEY, shipmentId INTEGER, eventTime DATETIME);
CREATE TABLE products (prod_id INTEGER PRIMARY KEY, prod_nm TEXT, unit_price REAL);
"""


@pytest.fixture
def schema_path(tmp_path):
    path = tmp_path / "schema.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA)
    return path


@pytest.fixture
def db(schema_path):
    database = open_database(str(schema_path))
    yield database
    database.close()


def test_names_split_into_words():
    assert split_words("customerAddressID") == ["customer", "address", "id"]
    assert split_words("cust_addr") == ["cust", "addr"]
    assert split_words("HTTPStatus2") == ["http", "status", "2"]


def test_abbreviations_expand_and_words_stem():
    assert terms("cust_addr") == ["cust", "customer", "addr", "address"]
    assert [stem(w) for w in ("orders", "addresses", "categories", "status", "shipping", "ordered")] == [
        "order",
        "address",
        "category",
        "status",
        "ship",
        "order",
    ]


def _top(db, keywords):
    match = search_schema(db, keywords)[0]
    return match.table, match.column


def test_tables_rank_by_keyword_match(db):
    assert _top(db, "customer address") == ("cust_addr", None)
    assert _top(db, "customers") == ("customers", None)
    assert _top(db, "shipment tracking") == ("ShipmentTracking", None)
    assert _top(db, ["product"]) == ("products", None)


def test_columns_rank_with_their_table_as_context(db):
    assert _top(db, "customer email") == ("customers", "email")
    assert _top(db, "order date") == ("orders", "order_date")
    assert _top(db, "product name") == ("products", "prod_nm")
    quantity = search_schema(db, "quantity")[0]
    assert (quantity.table, quantity.column, quantity.type) == ("order_items", "qty", "INTEGER")


def test_typos_still_find_names(db):
    assert "customers" in {m.table for m in search_schema(db, "custmers")}


def test_no_match_and_limits(db):
    assert search_schema(db, "zebra") == []
    assert len(search_schema(db, "id", limit=3)) == 3
    with pytest.raises(ValueError, match="keyword"):
        search_schema(db, "  --  ")


def test_schema_changes_are_picked_up(db, schema_path):
    assert search_schema(db, "invoice") == []
    with sqlite3.connect(schema_path) as conn:
        conn.execute("CREATE TABLE invoices (inv_id INTEGER PRIMARY KEY, inv_dt DATE)")
    assert _top(db, "invoice") == ("invoices", None)
    assert search_schema(db, "invoice date")[0].column == "inv_dt"


@pytest.mark.postgres
def test_comments_are_searched(pg_server_dsn):
    name = f"schema_search_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t_mst (k integer PRIMARY KEY, v1 text, v2 text)")
            conn.execute("COMMENT ON TABLE t_mst IS 'Master data of suppliers'")
            conn.execute("COMMENT ON COLUMN t_mst.v2 IS 'VAT registration number'")
        db = open_database(dsn)
        try:
            table = search_schema(db, "suppliers")[0]
            assert (table.table, table.column, table.comment) == ("t_mst", None, "Master data of suppliers")
            column = search_schema(db, "vat number")[0]
            assert (column.table, column.column) == ("t_mst", "v2")
            assert column.to_dict()["kind"] == "column"
        finally:
            db.close()
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

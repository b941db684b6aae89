"""The database tools through an in-memory MCP client, on SQLite, PostgreSQL, MySQL/MariaDB and DuckDB."""

from __future__ import annotations

import importlib.metadata
import re
import sqlite3

import anyio
import pytest
from mcp import Client

from dbtools.engines import open_database
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.fixture_schema import COMMON_TABLES, INJECTION, ORDERS_PER_STATUS, fixture_rows
from tests.queries_in_flight import QueriesInFlight
from tests.server.conftest import fenced_body

pytestmark = pytest.mark.anyio
CUSTOMERS = fixture_rows()["customers"]
ORDERS = fixture_rows()["orders"]


async def test_list_tables_with_counts_and_patterns(shop_server, shop_db):
    async with Client(shop_server) as client:
        everything = await client.call_tool("list_tables", {})
        by_glob = await client.call_tool("list_tables", {"pattern": "*S", "limit": 1})
        by_substring = await client.call_tool("list_tables", {"pattern": "DUCT"})
    tables = {t["name"]: t for t in everything.structured_content["tables"]}
    # PostgreSQL's fixture database holds a table in a schema of its own.
    invoices = ["sales.invoices"] if shop_db.dialect == "postgres" else []
    assert set(tables) == {*COMMON_TABLES, *invoices}
    assert tables["orders"]["row_count"] == len(ORDERS)
    assert tables["orders"]["column_count"] == 3
    # SQLite keeps no table comments.
    comment = None if shop_db.dialect == "sqlite" else "People and companies who order"
    assert tables["customers"]["description"] == comment
    # users, AlertLogs, countries, customers, products, orders, order_items, departments, employees
    assert (
        by_glob.structured_content["total"] == 9 + len(invoices) and by_glob.structured_content["truncated"]
    )
    assert len(by_glob.structured_content["tables"]) == 1
    assert [t["name"] for t in by_substring.structured_content["tables"]] == ["products"]
    assert "orders (3 columns, 40 rows)" in fenced_body(everything.content[0].text)


async def test_listing_and_description_follow_schema_and_data_changes(tmp_path):
    """Listings and descriptions are remembered between calls, and never past a change to the rows or the schema."""
    path = tmp_path / "changing.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO items (name) VALUES ('a'), ('b')")
    db = open_database(str(path), timeout_s=5.0)

    async def listing_and_description(client: Client) -> tuple[dict, dict]:
        listing = (await client.call_tool("list_tables", {})).structured_content
        described = (await client.call_tool("describe_table", {"table": "items"})).structured_content
        return {t["name"]: t["row_count"] for t in listing["tables"]}, described

    try:
        async with Client(build_server(Settings(timeout=5.0), db)) as client:
            counts, described = await listing_and_description(client)
            assert (counts, described["row_count"]) == ({"items": 2}, 2)
            assert await listing_and_description(client) == (counts, described)

            with sqlite3.connect(path) as conn:
                conn.execute("INSERT INTO items (name) VALUES ('c')")
            counts, described = await listing_and_description(client)
            assert (counts, described["row_count"]) == ({"items": 3}, 3)

            with sqlite3.connect(path) as conn:
                conn.execute("ALTER TABLE items ADD COLUMN price REAL")
                conn.execute("CREATE TABLE tags (item_id INTEGER REFERENCES items(id))")
            counts, described = await listing_and_description(client)
            assert counts == {"items": 3, "tags": 0}
            assert [c["name"] for c in described["columns"]] == ["id", "name", "price"]
            assert described["referenced_by"] == ["tags"]
    finally:
        db.close()


async def test_row_counts_of_slow_views_share_one_budget(tmp_path, monkeypatch):
    """Counting a view runs its query: a listing must not take the statement timeout once per view."""
    import sqlite3
    import time

    import mcp_server.tools.results

    path = tmp_path / "views.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        for i in range(4):
            conn.execute(
                f"CREATE VIEW endless{i} AS "
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
            )
    monkeypatch.setattr(mcp_server.tools.results, "COUNT_BUDGET_S", 0.5)
    db = open_database(str(path), timeout_s=5.0)
    try:
        async with Client(build_server(Settings(timeout=5.0), db)) as client:
            started = time.monotonic()
            listing = await client.call_tool("list_tables", {})
            overview = (await client.read_resource("schema://overview")).contents[0].text
            elapsed = time.monotonic() - started
    finally:
        db.close()
    counts = {t["name"]: t["row_count"] for t in listing.structured_content["tables"]}
    assert counts == {"t": 0, "endless0": None, "endless1": None, "endless2": None, "endless3": None}
    assert overview.count("row count unknown") == 4
    assert elapsed < 5.0  # one view's full timeout; without the shared budget it is eight


async def test_describe_table_shows_keys_both_ways(shop_server):
    async with Client(shop_server) as client:
        orders = (await client.call_tool("describe_table", {"table": "ORDERS"})).structured_content
        customers = (await client.call_tool("describe_table", {"table": "customers"})).structured_content
    assert orders["name"] == "orders"
    assert {"columns": ["customer_id"], "ref_table": "customers", "ref_columns": ["id"]} in orders[
        "foreign_keys"
    ]
    assert [c["name"] for c in orders["columns"] if c["primary_key"]] == ["id"]
    assert customers["referenced_by"] == ["orders"]
    assert "CREATE TABLE" in orders["create_sql"].upper()


async def test_unknown_table_names_the_close_matches(shop_server):
    async with Client(shop_server) as client:
        for tool in ("describe_table", "sample_rows"):
            result = await client.call_tool(tool, {"table": "custmers"})
            assert result.is_error
            assert "customers" in fenced_body(result.content[0].text)


async def test_search_schema_ranks_tables_and_columns(shop_server):
    async with Client(shop_server) as client:
        result = await client.call_tool("search_schema", {"keywords": "product price", "limit": 3})
    matches = result.structured_content["matches"]
    assert len(matches) <= 3
    assert ("products", "price") in {(m["table"], m["column"]) for m in matches}
    assert "products" in fenced_body(result.content[0].text)


@pytest.mark.parametrize("keywords", ["   ", "(.*)+$"])
async def test_search_schema_without_a_keyword_says_what_to_send(shop_server, keywords):
    async with Client(shop_server) as client:
        result = await client.call_tool("search_schema", {"keywords": keywords})
    assert result.is_error
    assert "search_schema: give at least one keyword (letters or digits)" in result.content[0].text


async def test_search_values_finds_spellings_and_narrows(shop_server):
    async with Client(shop_server) as client:
        anywhere = await client.call_tool("search_values", {"text": "LONDON"})
        narrowed = await client.call_tool(
            "search_values", {"text": "ship", "table": "orders", "column": "status"}
        )
        column_only = await client.call_tool("search_values", {"text": "x", "column": "status"})
        unknown = await client.call_tool("search_values", {"text": "x", "table": "ordrs"})
    best = anywhere.structured_content["matches"][0]
    assert (best["table"], best["column"], best["values"]) == ("customers", "city", ["London"])
    assert best["match_type"] == "case_insensitive" and best["matching_rows"] == 2
    assert [(m["column"], m["values"]) for m in narrowed.structured_content["matches"]] == [
        ("status", ["shipped"])
    ]
    assert column_only.is_error and "give the table" in column_only.content[0].text
    assert unknown.is_error and "orders" in fenced_body(unknown.content[0].text)


async def test_search_values_with_an_unknown_name_says_which_names_are_close(shop_server):
    async with Client(shop_server) as client:
        table = await client.call_tool("search_values", {"text": "London", "table": "custmers"})
        described = await client.call_tool("describe_table", {"table": "custmers"})
        column = await client.call_tool(
            "search_values", {"text": "London", "table": "customers", "column": "cty"}
        )
    assert table.is_error and column.is_error
    # The same closest-names error as describe_table's, not "0 columns hold values".
    assert fenced_body(table.content[0].text) == fenced_body(described.content[0].text)
    assert (
        fenced_body(table.content[0].text)
        == 'no table named "custmers"; closest: customers, users, countries'
    )
    assert fenced_body(column.content[0].text) == 'no column "cty" in table "customers"; closest: city'


async def test_search_values_in_a_number_column_says_to_compare_it_in_sql(shop_server, shop_db):
    async with Client(shop_server) as client:
        numbers = await client.call_tool(
            "search_values", {"text": "3", "table": "order_items", "column": "quantity"}
        )
    assert numbers.is_error
    text = numbers.content[0].text
    declared = shop_db.table("order_items").column("quantity").type.lower()  # "int(11)" on MySQL
    assert f"order_items.quantity holds {declared} values and only text columns are searched" in text.lower()
    assert f"where {shop_db.quote('quantity')} = ..." in text.lower()


async def test_search_values_grounds_a_name_to_the_keys_that_reference_it(shop_server):
    async with Client(shop_server) as client:
        result = await client.call_tool("search_values", {"text": "Grace Hopper"})
    best = result.structured_content["matches"][0]
    assert (best["table"], best["column"], best["match_type"]) == ("customers", "name", "exact")
    assert best["row_keys"] == {"id": 2}
    assert any("orders.customer_id" in link for link in best["foreign_keys"])
    body = fenced_body(result.content[0].text)
    assert "row keys id=2" in body and "orders.customer_id" in body


async def test_sample_rows_and_the_fence_holds_against_injected_text(shop_server):
    async with Client(shop_server) as client:
        result = await client.call_tool("sample_rows", {"table": "customers", "limit": 3})
    assert result.structured_content["rows"][2] == list(CUSTOMERS[2])
    assert result.structured_content["row_count"] == 3
    text = result.content[0].text
    # The injected row sits inside the fence: the data cannot produce the closing marker's random tag.
    assert INJECTION in fenced_body(text)


@pytest.mark.parametrize(
    "name",
    ['customers"; DROP TABLE customers; --', "customers LIMIT 1; SELECT 1", "customers) UNION SELECT 1 --"],
)
async def test_sample_rows_takes_only_a_catalog_table(shop_server, name):
    """sample_rows builds its SQL from the catalog's name: anything else in the argument is a name not found."""
    async with Client(shop_server) as client:
        refused = await client.call_tool("sample_rows", {"table": name})
        still_there = await client.call_tool("sample_rows", {"table": "customers", "limit": 1})
    assert refused.is_error and "Not found:" in refused.content[0].text
    assert still_there.structured_content["row_count"] == 1


async def test_sample_rows_quotes_names_with_quotes_and_keywords(tmp_path):
    path = tmp_path / "odd.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE "odd ""name"" select" ("from" INTEGER, "a""b" TEXT)')
        conn.execute('INSERT INTO "odd ""name"" select" VALUES (1, \'x\'), (2, \'y\')')
    db = open_database(str(path), timeout_s=5.0)
    try:
        async with Client(build_server(Settings(timeout=5.0), db)) as client:
            result = await client.call_tool("sample_rows", {"table": 'odd "name" select', "limit": 1})
    finally:
        db.close()
    assert result.structured_content["columns"] == ["from", 'a"b']
    assert result.structured_content["rows"] == [[1, "x"]]


async def test_run_query_results_caps_and_errors(shop_server):
    async with Client(shop_server) as client:
        counted = await client.call_tool(
            "run_query", {"sql": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY status"}
        )
        capped = await client.call_tool(
            "run_query", {"sql": "SELECT id FROM orders ORDER BY id", "max_rows": 5}
        )
        write = await client.call_tool("run_query", {"sql": "DELETE FROM orders"})
        stacked = await client.call_tool("run_query", {"sql": "SELECT 1; DROP TABLE orders"})
        invalid = await client.call_tool("run_query", {"sql": "SELECT nosuchcolumn FROM orders"})
        still_there = await client.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM orders"})
    assert counted.structured_content["rows"] == ORDERS_PER_STATUS
    assert capped.structured_content["rows"] == [[i] for i in range(1, 6)]
    assert capped.structured_content["truncated"] and "LIMIT" in capped.structured_content["truncation"]
    assert write.is_error and "Refused by the read-only policy:" in write.content[0].text
    assert stacked.is_error
    assert invalid.is_error and "nosuchcolumn" in fenced_body(invalid.content[0].text)
    assert still_there.structured_content["rows"] == [[len(ORDERS)]]


async def test_a_slow_query_is_cancelled_at_the_timeout(shop_dsn):
    settings = Settings(timeout=0.5)
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    with open_database(shop_dsn, timeout_s=settings.timeout) as db:
        if db.dialect == "mysql":  # MySQL and MariaDB end a recursion after 1,000 steps: 40^7 rows instead
            endless = (
                "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g"
            )
        async with Client(build_server(settings, db)) as client:
            slow = await client.call_tool("run_query", {"sql": endless})
            after = await client.call_tool("run_query", {"sql": "SELECT 2 AS two"})
    assert slow.is_error and "Timed out:" in slow.content[0].text
    assert after.structured_content["rows"] == [[2]]


async def test_bad_arguments_are_reported_and_the_server_keeps_serving(shop_server):
    async with Client(shop_server) as client:
        assert (await client.call_tool("sample_rows", {"table": "orders", "limit": 0})).is_error
        assert (await client.call_tool("run_query", {})).is_error
        assert (await client.call_tool("no_such_tool", {})).is_error
        assert (await client.call_tool("run_query", {"sql": ""})).is_error
        blank = await client.call_tool("ask_database", {"question": "  "})
        assert blank.is_error and "question" in blank.content[0].text
        assert "no text-to-SQL model" not in blank.content[0].text  # refused before the model is needed
        ok = await client.call_tool("run_query", {"sql": "SELECT 1 AS one"})
    assert ok.structured_content["rows"] == [[1]]


async def test_schema_overview_resource(shop_server):
    async with Client(shop_server) as client:
        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["schema://overview"]
        text = (await client.read_resource("schema://overview")).contents[0].text
    body = fenced_body(text)
    assert "**orders** (40 rows)" in body
    assert "**customers** (20 rows)" in body


async def test_many_concurrent_calls(shop_server, shop_db, monkeypatch):
    """Calls overlap: four queries are running in the database at one moment, and every answer is its own."""
    in_flight = QueriesInFlight(shop_db, monkeypatch, wanted=4)
    results: dict[int, object] = {}

    async with Client(shop_server) as client:

        async def one(i: int) -> None:
            sql = f"SELECT id, status FROM orders WHERE id = {1 + i % len(ORDERS)}"
            results[i] = await client.call_tool("run_query", {"sql": sql})

        async with anyio.create_task_group() as group:
            for i in range(40):
                group.start_soon(one, i)
    assert in_flight.most >= 4
    assert len(results) == 40
    for i, result in results.items():
        expected = ORDERS[i % len(ORDERS)]
        assert result.structured_content["rows"] == [[expected[0], expected[2]]]


async def test_descriptions_read_as_plain_text(shop_server):
    async with Client(shop_server) as client:
        tools = (await client.list_tools()).tools
    for tool in tools:
        # A docstring's indentation would reach the client as runs of spaces.
        assert not re.search(r"(^|\n)\s", tool.description), tool.name


async def test_errors_say_what_failed_in_words_not_class_names(shop_server):
    async with Client(shop_server) as client:
        failures = [
            await client.call_tool("run_query", {"sql": "DELETE FROM orders"}),
            await client.call_tool("run_query", {"sql": "SELECT nosuchcolumn FROM orders"}),
            await client.call_tool("describe_table", {"table": "custmers"}),
        ]
    summaries = [f.content[0].text.splitlines()[0] for f in failures]
    assert summaries == [
        "Error executing tool run_query: Refused by the read-only policy:",
        "Error executing tool run_query: The database rejected the query:",
        "Error executing tool describe_table: Not found:",
    ]
    for failure in failures:
        assert failure.is_error and not re.search(r"[A-Za-z]+Error\b", failure.content[0].text)


async def test_argument_errors_name_the_argument_without_pydantic_links(shop_server):
    async with Client(shop_server) as client:
        wrong_type = await client.call_tool("sample_rows", {"table": "orders", "limit": "five"})
        missing = await client.call_tool("run_query", {})
        ok = await client.call_tool("run_query", {"sql": "SELECT 1 AS one"})
    assert wrong_type.is_error and missing.is_error and not ok.is_error
    assert wrong_type.content[0].text == (
        "Error executing tool sample_rows: invalid arguments: "
        "limit: Input should be a valid integer, unable to parse string as an integer"
    )
    assert missing.content[0].text == "Error executing tool run_query: invalid arguments: sql: Field required"


async def test_counts_of_one_are_singular(tmp_path):
    path = tmp_path / "one.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE city (name TEXT)")
        conn.execute("INSERT INTO city VALUES ('Lisbon')")
    with open_database(str(path)) as db:
        async with Client(build_server(Settings(), db)) as client:
            listing = (await client.call_tool("list_tables", {})).content[0].text
            query = (await client.call_tool("run_query", {"sql": "SELECT name FROM city"})).content[0].text
            capped = await client.call_tool(
                "run_query", {"sql": "SELECT 1 UNION ALL SELECT 2", "max_rows": 1}
            )
            values = (await client.call_tool("search_values", {"text": "Lisbon"})).content[0].text
            schema = (await client.call_tool("search_schema", {"keywords": "city"})).content[0].text
            overview = (await client.read_resource("schema://overview")).contents[0].text
    assert listing.startswith("1 table.\n") and fenced_body(listing) == "city (1 column, 1 row)"
    assert query.startswith("1 row in ")
    assert capped.structured_content["truncation"].startswith("stopped at 1 row (row cap)")
    assert values.startswith("1 column holds values close to the text.\n")
    assert "city.name (exact, 1 row): 'Lisbon'" in fenced_body(values)
    assert schema.startswith("1 matching table or column.\n")
    assert "(sqlite, 1 table)" in overview and "**city** (1 row)" in overview


async def test_server_info_reports_the_package_version(shop_db, monkeypatch):
    async with Client(build_server(Settings(), shop_db)) as client:
        installed = client.server_info.version
    assert installed == importlib.metadata.version("sqlscout")

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    # From a source checkout that is not installed, pyproject.toml (which the installed copy was built from)
    # says the version.
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    async with Client(build_server(Settings(), shop_db)) as client:
        assert client.server_info.version == installed != ""


async def test_a_source_other_than_the_one_served_is_refused_naming_it(shop_server):
    """With one database the tools take no source: a client's source argument must not be dropped unheard."""
    async with Client(shop_server) as client:
        other = await client.call_tool("run_query", {"sql": "SELECT 1 AS n", "source": "sales"})
        served = await client.call_tool("run_query", {"sql": "SELECT 1 AS n", "source": "main"})
    assert (
        other.is_error
        and "unknown source 'sales'; this server serves one database, 'main'" in other.content[0].text
    )
    # Worded as every other refused call is.
    assert other.content[0].text.startswith("Error executing tool run_query: Invalid source argument:")
    assert "UNTRUSTED" not in other.content[0].text
    assert not served.is_error and served.structured_content["rows"] == [[1]]


async def test_list_sources_answers_with_one_database_too(shop_server, shop_db):
    async with Client(shop_server) as client:
        listed = await client.call_tool("list_sources", {})
    [only] = listed.structured_content["sources"]
    assert only["name"] == "main" and only["reachable"] and only["engine"] == shop_db.dialect
    assert only["table_count"] == len(COMMON_TABLES) + (1 if shop_db.dialect == "postgres" else 0)

"""run_query and explain_query as an assistant meets them: results sized for a context window, typed columns,
errors that name the closest tables and columns, plans without running anything; on every engine."""

from __future__ import annotations

import pytest
from mcp import Client

from mcp_server.tools.run_query import DEFAULT_RESULT_CHARS, DEFAULT_RESULT_ROWS
from tests.fixture_schema import fixture_rows
from tests.server.conftest import fenced_body

pytestmark = pytest.mark.anyio

PADDING = "y" * 200
NUMBERS = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 500) SELECT x FROM n"
# Each engine's names for the types of id, name, price and a NULL (None: the engine gives none; SQLite's and
# MySQL's text then says its type by its first value).
COLUMN_TYPES = {
    "sqlite": ["integer", "text", "real", None],
    "postgres": ["integer", "text", "numeric(8,2)", "text"],
    "mysql": ["int", "text", "decimal", None],
    "duckdb": ["INTEGER", "VARCHAR", "DECIMAL(8,2)", "INTEGER"],
}
# What each engine's plan shows for a lookup by primary key (PostgreSQL, knowing the table's 40 rows, scans them).
KEY_LOOKUP = {
    "sqlite": "SEARCH orders USING INTEGER PRIMARY KEY",
    "postgres": "Filter: (id = 3)",
    "mysql": "orders | const | PRIMARY | PRIMARY",
    "duckdb": "Filters: id=3",
}


async def test_without_max_rows_a_result_stops_near_2000_tokens_and_says_what_was_left_out(
    shop_server, shop_db
):
    padded = (
        f"concat(x, '{PADDING}')" if shop_db.dialect == "mysql" else f"x || '{PADDING}'"
    )  # MySQL: || is OR
    async with Client(shop_server) as client:
        default = await client.call_tool("run_query", {"sql": NUMBERS})
        wide = await client.call_tool(
            "run_query", {"sql": f"SELECT x, {padded} AS padded FROM ({NUMBERS}) AS t"}
        )
        asked = await client.call_tool("run_query", {"sql": NUMBERS, "max_rows": 80})
        over = await client.call_tool("run_query", {"sql": NUMBERS, "max_rows": 5000})
        small = await client.call_tool("run_query", {"sql": "SELECT id FROM orders"})
    result = default.structured_content
    assert result["row_count"] == DEFAULT_RESULT_ROWS and result["truncated"]
    assert result["truncation"].startswith(f"{500 - DEFAULT_RESULT_ROWS} more rows left out")
    assert "max_rows" in result["truncation"] and "LIMIT/OFFSET" in result["truncation"]
    assert result["truncation"] in default.content[0].text.splitlines()[0]
    # The character cap stops wide rows first.
    assert wide.structured_content["row_count"] < DEFAULT_RESULT_ROWS
    assert len(fenced_body(wide.content[0].text)) <= DEFAULT_RESULT_CHARS + 300
    left = 500 - wide.structured_content["row_count"]
    assert wide.structured_content["truncation"].startswith(f"{left} more rows left out")
    # An explicit max_rows is honoured up to --max-rows (100 here); above it, the cut names the cap and its flag.
    assert asked.structured_content["row_count"] == 80
    assert over.structured_content["row_count"] == 100
    assert over.structured_content["truncation"].startswith(
        "400 more rows left out: max_rows 5,000 is above this source's cap of 100 rows (--max-rows"
    )
    assert (
        small.structured_content["row_count"] == len(fixture_rows()["orders"])
        and not small.structured_content["truncated"]
    )


async def test_every_result_carries_its_column_types(shop_server, shop_db):
    async with Client(shop_server) as client:
        typed = await client.call_tool(
            "run_query",
            {
                "sql": "SELECT c.id, c.name, p.price, NULL AS missing FROM customers c, products p WHERE p.id = 1"
            },
        )
        empty = await client.call_tool("run_query", {"sql": "SELECT id, name FROM customers WHERE id < 0"})
    result = typed.structured_content
    assert result["columns"] == ["id", "name", "price", "missing"]
    expected = COLUMN_TYPES[shop_db.dialect]
    assert result["column_types"] == expected
    if shop_db.dialect == "sqlite":
        # SQLite types values, not result columns: without a value there is no type.
        assert empty.structured_content["column_types"] == [None, None]
    elif shop_db.dialect != "mysql":  # MySQL's text columns without a value have no type either
        assert empty.structured_content["column_types"] == expected[:2]
    header = fenced_body(typed.content[0].text).splitlines()[0]
    assert header.startswith(f"id ({expected[0]}) | name ({expected[1]}) | price (")


@pytest.mark.parametrize(
    ("sql", "unknown", "closest"),
    [
        ("SELECT stauts FROM orders", "stauts", "closest columns: status (orders)"),
        ("SELECT o.quantty FROM order_items o", "quantty", "closest columns: quantity (order_items)"),
        ("SELECT * FROM ordrs", "ordrs", "closest tables: orders, order_items"),
        ("SELECT titel FROM products", "titel", "closest columns: title (products)"),
    ],
)
async def test_a_query_on_an_unknown_name_names_the_closest_ones(shop_server, sql, unknown, closest):
    async with Client(shop_server) as client:
        failed = await client.call_tool("run_query", {"sql": sql})
        planned = await client.call_tool("explain_query", {"sql": sql})
    for result in (failed, planned):
        body = fenced_body(result.content[0].text)
        assert result.is_error and unknown in body  # the engine's own message stays
        assert closest in body.splitlines()


async def test_explain_query_shows_the_plan_without_running_the_query(shop_server, shop_db):
    slow = "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g"
    async with Client(shop_server) as client:
        plan = await client.call_tool("explain_query", {"sql": "SELECT * FROM orders WHERE id = 3"})
        never_run = await client.call_tool("explain_query", {"sql": slow})
    body = fenced_body(plan.content[0].text)
    assert plan.structured_content["plan"] == body
    assert KEY_LOOKUP[shop_db.dialect] in body
    # 40^7 rows would take far longer than the 5 s timeout to count: only the plan is made.
    assert not never_run.is_error and never_run.structured_content["plan"].count("\n") >= 6


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders",
        "WITH gone AS (DELETE FROM orders RETURNING id) SELECT * FROM gone",
        "EXPLAIN ANALYZE DELETE FROM orders",
        "explain select 1",
        "SELECT 1; DROP TABLE orders",
    ],
)
async def test_explain_query_refuses_what_query_refuses(shop_server, sql):
    async with Client(shop_server) as client:
        refused = await client.call_tool("explain_query", {"sql": sql})
        count = await client.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM orders"})
    assert refused.is_error
    assert "Refused by the read-only policy:" in refused.content[0].text
    assert count.structured_content["rows"] == [[len(fixture_rows()["orders"])]]

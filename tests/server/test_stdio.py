"""The server as a host starts it: `python -m mcp_server` over stdio in a subprocess."""

from __future__ import annotations

import os

import pytest

from dbtools.demo import GENERATOR_VERSION
from tests.fixture_schema import fixture_rows
from tests.server.conftest import stdio_client

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_every_database_tool_over_stdio(shop_dsn, cache_dir):
    await _every_database_tool(shop_dsn, cache_dir)


async def test_every_database_tool_over_stdio_on_a_folder_of_csv_files(csv_dsn, cache_dir):
    """--dsn naming a folder: DuckDB serves each CSV file in it as a table named after the file."""
    await _every_database_tool(csv_dsn, cache_dir)


async def _every_database_tool(dsn: str, cache_dir) -> None:
    async with stdio_client("--dsn", dsn, "--max-rows", "5", SQLSCOUT_CACHE_DIR=str(cache_dir)) as client:
        tables = await client.call_tool("list_tables", {"pattern": "order*"})
        described = await client.call_tool("describe_table", {"table": "orders"})
        schema = await client.call_tool("search_schema", {"keywords": "customer city"})
        values = await client.call_tool("search_values", {"text": "new york"})
        sample = await client.call_tool("sample_rows", {"table": "products", "limit": 2})
        query = await client.call_tool("run_query", {"sql": "SELECT id FROM orders ORDER BY id"})
        plan = await client.call_tool(
            "explain_query", {"sql": "SELECT count(*) FROM order_items WHERE quantity > 3"}
        )
        ask = await client.call_tool("ask_database", {"question": "How many orders?"})
    assert {t["name"] for t in tables.structured_content["tables"]} == {"orders", "order_items"}
    assert [c["name"] for c in described.structured_content["columns"]] == ["id", "customer_id", "status"]
    assert "CREATE TABLE" in described.structured_content["create_sql"].upper()
    assert schema.structured_content["matches"][0]["table"] == "customers"
    assert values.structured_content["matches"][0]["values"] == ["New York"]
    assert len(sample.structured_content["rows"]) == 2
    # --max-rows caps every result.
    assert (
        query.structured_content["row_count"] == 5 < len(fixture_rows()["orders"])
        and query.structured_content["truncated"]
    )
    assert not plan.is_error
    assert any(source in plan.structured_content["plan"].lower() for source in ("order_items", "read_csv"))
    assert ask.is_error and "--model DIR" in ask.content[0].text


async def test_default_dsn_is_the_demo_database(tmp_path, demo_database):
    """Without --dsn the server serves the demo database from SQLSCOUT_CACHE_DIR (where it is built on first use:
    tests/dbtools/test_demo.py); this one is the run's, not built again."""
    os.link(demo_database, tmp_path / demo_database.name)
    async with stdio_client(SQLSCOUT_CACHE_DIR=str(tmp_path)) as client:
        tables = await client.call_tool("list_tables", {"limit": 1})
    assert tables.structured_content["total"] > 100
    assert [p.name for p in tmp_path.iterdir()] == [f"demo-v{GENERATOR_VERSION}-seed0.sqlite"]


async def test_ask_database_on_a_tiny_local_model(sqlite_dsn, tiny_model_dir, cache_dir):
    progress = []

    async def on_progress(done, total, message):
        progress.append((done, total))

    async with stdio_client(
        "--dsn",
        sqlite_dsn,
        "--model",
        str(tiny_model_dir),
        "--device",
        "cpu",
        "--token-budget",
        "448",
        SQLSCOUT_CACHE_DIR=str(cache_dir),
    ) as client:
        result = await client.call_tool(
            "ask_database", {"question": "How many orders are there?"}, progress_callback=on_progress
        )
        after = await client.call_tool("run_query", {"sql": "SELECT 1 AS one"})
    assert not result.is_error, result.content[0].text
    answer = result.structured_content
    # The prompt takes most of the 448 tokens: after one reply there is room for neither another round nor the
    # forced final turn, and a random model's reply holds no runnable call, so the answer is that no SQL came.
    assert (answer["ending"], answer["sql"], answer["rows"], answer["trace"]) == ("no_sql", None, [], [])
    assert answer["sql_dialect"] == "sqlite"
    assert progress and len({total for _, total in progress}) == 1
    assert [done for done, _ in progress] == list(range(1, len(progress) + 1))
    assert progress[-1][0] <= progress[-1][1]
    assert after.structured_content["rows"] == [[1]]

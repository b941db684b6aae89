"""What the tool list costs a host's context, and that every result matches the schema the list publishes."""

from __future__ import annotations

import json

import jsonschema
import pytest
from mcp import Client

from mcp_server.model_runner import ModelRunner
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.server.test_ask import SCRIPT, byte_replay

pytestmark = pytest.mark.anyio

# The JSON a host receives for tools/list (compact, as the SDK writes it).
TOOL_LIST_BUDGET = 5_000
TOOLS = {
    "list_sources",
    "ask_database",
    "list_tables",
    "describe_table",
    "search_schema",
    "search_values",
    "sample_rows",
    "run_query",
    "explain_query",
}
# One call of every tool that returns structured content, on the fixture database.
CALLS = [
    ("list_tables", {}),
    ("describe_table", {"table": "orders"}),
    ("search_schema", {"keywords": "customer city"}),
    ("search_values", {"text": "new york"}),
    ("sample_rows", {"table": "customers"}),
    ("run_query", {"sql": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status"}),
    ("run_query", {"sql": "SELECT * FROM orders", "max_rows": 3}),
    ("explain_query", {"sql": "SELECT * FROM orders WHERE id = 3"}),
    ("ask_database", {"question": "How many orders per status?"}),
]


def tool_list_chars(tools) -> int:
    listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return len(json.dumps({"tools": listed}, separators=(",", ":")))


def list_typed(schema) -> list:
    """Every `type` in a schema, at any depth, that is a list of types."""
    if isinstance(schema, list):
        return [found for item in schema for found in list_typed(item)]
    if not isinstance(schema, dict):
        return []
    own = [schema["type"]] if isinstance(schema.get("type"), list) else []
    return own + [found for value in schema.values() for found in list_typed(value)]


def server_with_model(db):
    settings = Settings(max_rows=100)
    return build_server(settings, db, ModelRunner(settings, db, policy=byte_replay(SCRIPT)))


async def test_without_a_model_the_list_is_small_and_ask_database_says_how_to_enable_it(shop_server):
    async with Client(shop_server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        instructions = client.instructions
        asked = await client.call_tool("ask_database", {"question": "How many orders?"})
    assert set(tools) == TOOLS
    assert tool_list_chars(tools.values()) <= TOOL_LIST_BUDGET
    assert tools["ask_database"].description.startswith("Not enabled: start the server with --model DIR")
    assert tools["ask_database"].output_schema is None
    assert "ask_database" not in instructions and "read-only" in instructions.lower()
    assert asked.is_error and "--model DIR" in asked.content[0].text


async def test_with_a_model_the_whole_list_fits_and_the_instructions_offer_it(shop_db):
    async with Client(server_with_model(shop_db)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        instructions = client.instructions
    assert set(tools) == TOOLS
    assert tool_list_chars(tools.values()) <= TOOL_LIST_BUDGET
    assert "call ask_database" in instructions
    for tool in tools.values():
        assert tool.annotations.read_only_hint is True and tool.annotations.open_world_hint is False
        assert tool.output_schema["type"] == "object" and tool.output_schema["properties"]
        assert '"items"' not in json.dumps(
            tool.output_schema
        )  # a result's lists are not checked item by item
        assert "title" not in json.dumps(tool.input_schema) + json.dumps(tool.output_schema)
        assert "\n" not in tool.description
        # One type per schema: hosts that map tool schemas onto a one-type dialect reject a list of types.
        assert not list_typed(tool.input_schema) and not list_typed(tool.output_schema), tool.name


async def test_every_result_matches_its_published_schema(shop_db):
    async with Client(server_with_model(shop_db)) as client:
        schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        for name, arguments in CALLS:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result.content[0].text
            jsonschema.validate(result.structured_content, schemas[name])
            # Every published field is in the result: the schemas list no `required` keys.
            assert set(schemas[name]["properties"]) == set(result.structured_content)

"""Rules under load: sixteen HTTP clients at once, on a source with hidden columns and row filters, on a server
process, get every ordinary call answered, and none of them sees a filtered-out row."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.server.conftest import ServerProcess, subprocess_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLIENTS = 16
CALLS = [
    ("run_query", {"sql": "SELECT count(*) FROM customers"}),
    (
        "run_query",
        {
            "sql": "SELECT c.name, count(o.id) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name"
        },
    ),
    ("run_query", {"sql": "SELECT * FROM customers ORDER BY id"}),
    ("list_tables", {}),
    ("describe_table", {"table": "customers"}),
    ("sample_rows", {"table": "customers", "limit": 5}),
    ("explain_query", {"sql": "SELECT name FROM customers WHERE id > 2"}),
]


@pytest.fixture(scope="module")
def server(sqlite_dsn, tmp_path_factory):
    config = tmp_path_factory.mktemp("load") / "team.toml"
    config.write_text(
        f'[sources.shop]\ndsn = "{sqlite_dsn}"\nhidden_columns = ["customers.city"]\n'
        "row_filters = { customers = \"country_code = 'DE'\" }\n"
    )
    process = ServerProcess("--config", str(config), env=subprocess_env())
    yield process
    process.stop()


async def test_sixteen_clients_at_once_get_every_ordinary_call_answered(server, sqlite_dsn):
    import sqlite3

    with sqlite3.connect(sqlite_dsn) as conn:
        [(kept,)] = conn.execute("SELECT count(*) FROM customers WHERE country_code = 'DE'").fetchall()
    failures: list[str] = []
    counts: list[int] = []

    async def client_calls() -> None:
        async with Client(streamable_http_client(server.url)) as client:
            for name, arguments in CALLS:
                result = await client.call_tool(name, arguments)
                if result.is_error:
                    failures.append(f"{name}: {result.content[0].text}")
                elif name == "run_query" and arguments["sql"].startswith("SELECT count(*)"):
                    counts.append(result.structured_content["rows"][0][0])

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for _ in range(CLIENTS):
                group.start_soon(client_calls)
    assert failures == []
    assert counts == [kept] * CLIENTS

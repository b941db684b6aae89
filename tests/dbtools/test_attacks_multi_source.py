"""The attack suite through one server serving every engine as named sources: each attack, sent to each source
by a real MCP client, is refused, and no source's tables change."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from dbtools.sources import ServerLimits, SourceSet, SourceSpec
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.dbtools.test_attacks import ATTACKS
from tests.fixture_schema import snapshot

SOURCES = {
    "lite": "sqlite",
    "pg": pytest.param("postgres", marks=pytest.mark.postgres),
    "maria": pytest.param("mysql", marks=pytest.mark.mysql),
    "duck": "duckdb",
    "files": "csv",
}
# The templates that need a per-test folder or object are the single-engine suite's.
STATEMENTS = [sql for _, sqls in ATTACKS.values() for sql in sqls if "{" not in sql]


@pytest.mark.parametrize(
    "engine",
    list(SOURCES.values()),
    ids=list(SOURCES),
)
def test_every_attack_on_a_named_source_is_refused_and_changes_nothing(engine, request):
    dsn = request.getfixturevalue(f"{engine}_dsn")
    # Served beside another source, so that each call must name it.
    other = request.getfixturevalue("sqlite_dsn")
    specs = [SourceSpec("target", dsn, timeout=1.0), SourceSpec("bystander", other, timeout=1.0)]
    sources = SourceSet(specs, ServerLimits(timeout=1.0, max_rows=100, pool_size=4, connect_timeout=5))
    before = snapshot(dsn, engine)
    answered = []

    async def attack() -> None:
        async with Client(build_server(Settings(), sources, named=True)) as client:
            for sql in STATEMENTS:
                result = await client.call_tool("run_query", {"sql": sql, "source": "target"})
                if not result.is_error:
                    answered.append(sql)

    try:
        anyio.run(attack)
    finally:
        sources.close()
    assert answered == []
    assert snapshot(dsn, engine) == before

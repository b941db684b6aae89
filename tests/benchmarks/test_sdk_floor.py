"""The SDK floor the peers benchmark times: a real stdio server whose one tool answers without any work."""

import anyio
from mcp import Client
from mcp.client.stdio import stdio_client

from benchmarks.peers.sdk_floor import NOOP_TOOL
from benchmarks.peers.servers import sdk_floor
from benchmarks.peers.tasks import BIG_RESULT, TASKS


async def _list_and_call(params):
    async with Client(stdio_client(params), cache=None) as client:
        tools = (await client.list_tools()).tools
        return tools, await client.call_tool(NOOP_TOOL, {})


def test_the_floor_answers_its_noop_over_stdio_as_text_only_for_every_small_task():
    floor = sdk_floor()
    tools, result = anyio.run(_list_and_call, floor.params)
    assert [(t.name, t.output_schema) for t in tools] == [(NOOP_TOOL, None)]
    assert not result.is_error
    assert [block.text for block in result.content] == ["ok"]
    assert result.structured_content is None
    assert set(floor.calls) == set(TASKS) - {BIG_RESULT}

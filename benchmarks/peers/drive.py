"""Drives every server from one MCP client over stdio: its tool list once, then each task's call, timed."""

from __future__ import annotations

import json
import re
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import stdio_client

from benchmarks.peers.servers import Server
from benchmarks.peers.tasks import Call

CALL_TIMEOUT_S = 300.0


@dataclass
class TaskMeasure:
    """The timed calls of one task on one server, and the size of what it returned."""

    call: Call
    seconds: list[float] = field(default_factory=list)
    text_chars: int = 0
    structured_chars: int = 0
    error: str | None = None


@dataclass
class ServerMeasure:
    """What one server offers (its tool list, as the client sees it) and its measures per task."""

    name: str
    version: str
    protocol: str
    tool_count: int
    tools_chars: int
    tasks: dict[str, TaskMeasure]


def compact_chars(value: Any) -> int:
    """Characters of value as compact JSON, the form it crosses the wire in."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _innermost(error: BaseException) -> str:
    """The first leaf of nested exception groups (what the task group around the transport raised), named."""
    while getattr(error, "exceptions", None):
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


async def _start(stack: AsyncExitStack, server: Server, log_dir: Path) -> tuple[Client, ServerMeasure]:
    # Peers print banners and warnings on stderr: kept in a log per server instead of over the table.
    log_name = re.sub(r"[^\w.-]+", "-", server.name) + ".log"
    errlog = stack.enter_context((log_dir / log_name).open("w"))
    # No response cache: every listing and call goes to the server.
    client = Client(
        stdio_client(server.params, errlog=errlog), read_timeout_seconds=CALL_TIMEOUT_S, cache=None
    )
    await stack.enter_async_context(client)
    tools, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
        if not (cursor := page.next_cursor):
            break
    measure = ServerMeasure(
        name=server.name,
        version=client.server_info.version,
        protocol=client.protocol_version,
        tool_count=len(tools),
        tools_chars=compact_chars(tools),
        tasks={task: TaskMeasure(call) for task, call in server.calls.items()},
    )
    return client, measure


async def _call(client: Client, task: TaskMeasure, timed: bool) -> None:
    started = time.perf_counter()
    try:
        result = await client.call_tool(task.call.tool, task.call.arguments)
    except Exception as error:  # a peer that dies or hangs fails its task, not the whole run
        task.error = _innermost(error)
        return
    elapsed = time.perf_counter() - started
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        task.error = text.strip().splitlines()[0] if text.strip() else "error without text"
        return
    if timed:
        task.seconds.append(elapsed)
    task.text_chars = len(text)
    task.structured_chars = compact_chars(result.structured_content) if result.structured_content else 0


async def measure(
    servers: list[Server], tasks: tuple[str, ...], repeats: int, warmup: int, log_dir: Path
) -> tuple[list[ServerMeasure], dict[str, str]]:
    """Every server's measures, and for each server that did not start, why.

    All servers run at once and are called round by round, task by task, server by server, so that a change
    in the machine's load falls on each of them alike.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    started: list[tuple[Client, ServerMeasure]] = []
    failed: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        for server in servers:
            try:
                started.append(await _start(stack, server, log_dir))
            except Exception as error:  # a peer that cannot start is skipped, the others still measured
                failed[server.name] = f"did not start ({_innermost(error)}); its log is in {log_dir}"
        for round_index in range(warmup + repeats):
            for task in tasks:
                for client, server_measure in started:
                    task_measure = server_measure.tasks.get(task)
                    if task_measure is not None and task_measure.error is None:
                        await _call(client, task_measure, timed=round_index >= warmup)
    return [m for _, m in started], failed

"""Each tool call as an audit record: who asked, what, and how it ended, written before the answer goes out."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult

from mcp_server.audit_log import AuditLog, AuditLogError, AuditRecord

log = logging.getLogger(__name__)

# The record of the call being answered, for a tool that adds to it (ask_database: the agent's queries).
current_call: ContextVar[AuditRecord | None] = ContextVar("current_call", default=None)
# The first line of a refused statement's error (server.ERROR_SUMMARIES) and of a cancelled question's.
REFUSED_PREFIX = "Refused by the read-only policy:"
CANCELLED_PREFIXES = ("ask_database was cancelled", "ask_database stopped")
SDK_ERROR_PREFIX = "Error executing tool "  # the SDK's words before a tool's own error text


def error_outcome(message: str) -> str:
    """refused, cancelled or error, from a tool error's text (with or without the SDK's prefix)."""
    if message.startswith(SDK_ERROR_PREFIX):
        message = message.split(": ", 1)[-1]
    if message.startswith(REFUSED_PREFIX):
        return "refused"
    if message.startswith(CANCELLED_PREFIXES):
        return "cancelled"
    return "error"


async def audited(
    audit: AuditLog | None,
    tool: str,
    arguments: dict[str, Any],
    identity: str,
    source: str | None,
    call: Callable[[], Awaitable[Any]],
) -> Any:
    """Run `call` and log it; an answer whose record cannot be written becomes an error saying so."""
    if audit is None:
        return await call()
    record = AuditRecord(identity=identity, tool=tool, arguments=arguments, source=source)
    token = current_call.set(record)
    started = time.perf_counter()
    try:
        result = await call()
    except ToolError as error:
        record.outcome = error_outcome(str(error))
        _write(audit, record, started)
        raise
    except anyio.get_cancelled_exc_class():
        record.outcome = "cancelled"
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_write_quietly, audit, record, started)
        raise
    finally:
        current_call.reset(token)
    if isinstance(result, CallToolResult):
        content = result.structured_content or {}
        text = result.content[0].text if result.content and hasattr(result.content[0], "text") else ""
        record.outcome = error_outcome(text) if result.is_error else "ok"
        record.rows = content.get("row_count")
        record.truncated = content.get("truncated")
    _write(audit, record, started)
    return result


def _write(audit: AuditLog, record: AuditRecord, started: float) -> None:
    record.duration_ms = round((time.perf_counter() - started) * 1000, 1)
    try:
        audit.write(record)
    except AuditLogError as error:
        raise ToolError(f"{error}; the call was not answered") from error


def _write_quietly(audit: AuditLog, record: AuditRecord, started: float) -> None:
    """A cancelled call has no answer to withhold: a failed write is logged."""
    try:
        _write(audit, record, started)
    except ToolError as error:
        log.error("%s", error)

"""The ask_database tool: a question in plain language answered by the text-to-SQL agent, or, without a model,
how to enable it; and the agent's answer as the tool's result."""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from dbtools.errors import DatabaseToolError
from dbtools.plural import counted
from mcp_server.agent import AgentAnswer, RoundEvent
from mcp_server.agent.errors import ModelError, PolicyConfigError
from mcp_server.agent.outcome import dialect_fields
from mcp_server.agent.policies import MODEL_SETUP_HINT
from mcp_server.call_audit import current_call
from mcp_server.client_presence import ClientLeft, run_while_client_waits
from mcp_server.model_runner import ModelLoadError
from mcp_server.server_models import AskAnswer
from mcp_server.source_tools import SourceArgument
from mcp_server.tools.context import ToolContext
from mcp_server.tools.results import structured
from mcp_server.untrusted import fence, render_rows
from model.serving.cancel import CancelEvent, Cancelled

log = logging.getLogger(__name__)


async def ask_database(
    context: ToolContext,
    question: Annotated[str, Field(pattern=r"\S")],
    ctx: Context,
    evidence: Annotated[
        str | None,
        Field(description="domain knowledge, e.g. 'rich means balance > 1e6'"),
    ] = None,
    source: SourceArgument = None,
) -> CallToolResult:
    """Answer a question in plain language: a text-to-SQL model explores the database and returns its SQL,
    rows and trace."""
    db = context.opened(source)  # an unreachable source fails before the question waits for its turn
    cancel = CancelEvent()

    def on_round(event: RoundEvent) -> None:
        if cancel.is_set():
            return
        message = f"round {event.round} of {event.max_rounds}: {counted(len(event.calls), 'tool call')}"
        try:
            anyio.from_thread.run(ctx.report_progress, event.round, event.max_rounds, message)
        except Exception:
            log.debug("progress notification not delivered", exc_info=True)

    runner = context.runner
    ask = partial(runner.ask, question, evidence, database=db, on_round=on_round, cancel=cancel)
    try:
        answer = await run_while_client_waits(ctx, ask, cancel, runner.threads)
    except ClientLeft as error:
        raise ToolError(f"ask_database stopped: {error}") from error
    except (PolicyConfigError, ModelLoadError, ModelError) as error:
        log.debug("ask_database failed", exc_info=True)  # the SDK logs the message, in one line
        raise ToolError(f"{error}\nThe other tools work without a model.") from error
    except Cancelled as error:
        raise ToolError(f"ask_database was cancelled: {error}") from error
    except DatabaseToolError as error:
        raise ToolError(fence("ask_database failed:", str(error))) from error
    record = current_call.get()
    if record is not None:
        record.queries = agent_queries(answer)
    result = ask_answer(answer)
    more = ", more rows exist" if result.truncated else ""
    summary = f"ask_database answer ({result.ending}): {counted(result.row_count, 'row')}{more}."
    body = "\n\n".join(
        [
            f"SQL:\n{result.sql or '(none)'}" + (f"\nerror: {result.error}" if result.error else ""),
            "result:\n" + render_rows(result.columns, result.rows),
            "exploration:\n" + "\n".join(result.trace),
        ]
    )
    return structured(result, summary, body)


def ask_database_unavailable(
    context: ToolContext, question: Annotated[str, Field(pattern=r"\S")]
) -> CallToolResult:
    """Not enabled: start the server with --model DIR or --endpoint URL to answer questions in plain
    language."""
    raise ToolError(
        f"no text-to-SQL model is configured: {MODEL_SETUP_HINT}\nThe other tools work without a model."
    )


def agent_queries(answer: AgentAnswer) -> list[str]:
    """The SQL of every query the agent's episodes ran (run and explained), in order, the answer's last."""
    queries = [
        call.args["sql"]
        for record in answer.chosen.trace.rounds
        for call in record.calls
        if isinstance(call.args, dict) and isinstance(call.args.get("sql"), str)
    ]
    if answer.sql and (not queries or queries[-1] != answer.sql):
        queries.append(answer.sql)
    return queries


def ask_answer(answer: AgentAnswer) -> AskAnswer:
    """The agent's answer as the tool's result type, with one trace line per tool call."""
    chosen = answer.chosen
    trace = [
        f"round {record.index}: {call.tool} {json.dumps(call.args, ensure_ascii=False)}"
        + (f" -> error: {call.error}" if call.error else "")
        for record in chosen.trace.rounds
        for call in record.calls
    ]
    return AskAnswer(
        **dialect_fields(chosen, answer.dialect),
        columns=chosen.columns,
        rows=chosen.result_rows(),
        row_count=chosen.row_count,
        truncated=chosen.truncated,
        error=chosen.error,
        ending=chosen.ending,
        votes=answer.votes,
        trace=trace,
        metrics=answer.metrics,
    )

"""One episode of the protocol as a state machine: it takes a completion, runs its calls, and says what to
append next, so that several episodes can advance in lockstep on one batched engine."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dbtools.agent_tools import AgentToolbox
from dbtools.errors import DatabaseToolError
from dbtools.safety import referenced_tables
from mcp_server.agent.chat_format import ChatFormat
from mcp_server.agent.dialect import MODEL_DIALECT, DialectTranslator
from mcp_server.agent.policies.base import Completion, PolicyRun
from mcp_server.agent.reply_parser import ToolCall, extract_sql, parse_reply
from mcp_server.agent.trace import CallRecord, EpisodeTrace, RoundRecord
from mcp_server.agent.turns import (
    FORMAT_REMINDER,
    budget_line,
    forced_answer_message,
    result_entry,
    results_turn,
)

SQL_TOOLS = ("run_query", "submit_sql")
# Another exploration turn needs room to think and call; a final answer needs room for one query.
MIN_EXPLORATION_ROOM = 256
MIN_ANSWER_ROOM = 32


@dataclass(frozen=True)
class EpisodeLimits:
    """The protocol's limits, as the model was trained: six tool rounds, four failed queries in a row,
    12,288 tokens per episode (prompt included). Every other default refers to these."""

    max_rounds: int = 6
    max_failed_queries: int = 4
    token_budget: int = 12288


@dataclass
class Episode:
    """The protocol's rules for one row of a policy run."""

    row: int
    toolbox: AgentToolbox
    translate: DialectTranslator
    chat: ChatFormat
    limits: EpisodeLimits
    transcript: str
    trace: EpisodeTrace = field(default_factory=EpisodeTrace)
    pending: str = ""  # text to append before the next completion
    phase: str = "explore"  # explore -> answer (the forced final turn) -> done
    tool_rounds: int = 0
    failed_in_a_row: int = 0
    last_good_sql: str | None = None  # SQLite dialect, as the model wrote it
    final_sql: str | None = None  # SQLite dialect
    ending: str | None = None  # submit_sql | answer | forced_answer (fallback/no_sql decided on execution)

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def generation_limit(self, run: PolicyRun) -> int:
        return self.limits.token_budget - run.length(self.row)

    def take_turn(self, completion: Completion, appended_tokens: int, run: PolicyRun) -> list[str]:
        """Apply one completion; returns the names of the tools it ran."""
        self.transcript += completion.raw
        self.trace.generated_tokens += completion.tokens
        if not self.trace.rounds:
            # Measured after the reply: exact even where the policy could only estimate the prompt's length.
            appended_tokens = self.trace.prompt_tokens = run.length(self.row) - completion.tokens
        reply = parse_reply(completion.text, thinking_open=self.chat.thinking_open)
        record = RoundRecord(
            index=len(self.trace.rounds) + 1,
            kind="answer" if self.phase == "answer" else "tool",
            reasoning=reply.reasoning,
            reply=reply.action,
            malformed_calls=reply.malformed_calls,
            appended_tokens=appended_tokens,
            generated_tokens=completion.tokens,
            stopped=completion.stopped,
            model_ms=completion.model_s * 1000,
        )
        self.trace.rounds.append(record)
        if self.phase == "answer":
            # SQL inside a call is read from its decoded JSON: the raw text still holds the JSON escapes.
            sql_calls = [c.args["sql"].strip() for c in reply.calls if isinstance(c.args.get("sql"), str)]
            self._finish(sql_calls[-1] if sql_calls else extract_sql(reply.action), "forced_answer")
            return []
        entries = self._run_calls(reply.calls, record)
        if self.done:
            return [c.tool for c in record.calls]
        if not reply.calls:
            answer = extract_sql(reply.action) if reply.malformed_calls == 0 else None
            if answer is not None:
                self._finish(answer, "answer")
                return []
        self.tool_rounds += 1
        self._prepare_next(completion, entries, run)
        return [c.tool for c in record.calls]

    def _run_calls(self, calls: list[ToolCall], record: RoundRecord) -> list[str]:
        entries = []
        for call in calls:
            if (
                call.tool == "submit_sql"
                and isinstance(call.args.get("sql"), str)
                and call.args["sql"].strip()
            ):
                sql = call.args["sql"].strip()
                record.calls.append(
                    CallRecord(
                        tool=call.tool,
                        args=call.args,
                        output="",
                        tables=referenced_tables(sql, MODEL_DIALECT),
                        sql=sql,
                        executed_sql=self.translate(sql),
                    )
                )
                self._finish(sql, "submit_sql")
                return entries
            call_record = self._run_call(call)
            record.calls.append(call_record)
            record.db_ms += call_record.db_ms
            entries.append(result_entry(call.to_json(), call_record.output))
            if call.tool == "run_query":
                if call_record.error is None:
                    self.failed_in_a_row = 0
                    self.last_good_sql = call_record.sql
                else:
                    self.failed_in_a_row += 1
                    if self.failed_in_a_row >= self.limits.max_failed_queries:
                        self.trace.limit = "failed_queries"
                        break  # the round's remaining calls are not run: exploration is over
        return entries

    def _run_call(self, call: ToolCall) -> CallRecord:
        args = dict(call.args)
        sql = args.get("sql") if call.tool in SQL_TOOLS and isinstance(args.get("sql"), str) else None
        executed = None
        if sql is not None:
            executed = self.translate(sql)
            args["sql"] = executed
        started = time.perf_counter()
        try:
            output = self.toolbox.call(call.tool, args)
            text, tables, error = output.text, list(output.tables), output.error
        except DatabaseToolError as exc:  # the database itself failed (connection lost): the model sees why
            text, tables, error = str(exc), [], str(exc)
        return CallRecord(
            tool=call.tool,
            args=call.args,
            output=text,
            tables=tables,
            error=error,
            sql=sql,
            executed_sql=executed,
            db_ms=(time.perf_counter() - started) * 1000,
        )

    def _prepare_next(self, completion: Completion, entries: list[str], run: PolicyRun) -> None:
        """The next user turn: results and budget line, or the forced answer when exploration is over."""
        turns_left = self.limits.max_rounds - self.tool_rounds
        if self.trace.limit is None and turns_left <= 0:
            self.trace.limit = "rounds"
        if self.trace.limit is None:
            # A round without a call gets the format reminder; the forced answer stands alone instead.
            results = entries or [FORMAT_REMINDER]
            text = self.chat.next_turn(completion.raw, results_turn(results, budget_line(turns_left)))
            if self._room(run, text) >= MIN_EXPLORATION_ROOM:
                self._append(text)
                return
            self.trace.limit = "tokens"
        forced = forced_answer_message(self.last_good_sql)
        text = self.chat.next_turn(completion.raw, results_turn(entries, forced))
        if self._room(run, text) >= MIN_ANSWER_ROOM:
            self.phase = "answer"
            self._append(text)
        else:
            self.trace.limit = "tokens"
            self._finish(None, None)

    def _room(self, run: PolicyRun, text: str) -> int:
        return self.limits.token_budget - run.length(self.row) - run.count_tokens(text)

    def _append(self, text: str) -> None:
        self.pending = text
        self.transcript += text

    def out_of_tokens(self) -> None:
        """The sequence reached the budget before another turn could be asked for."""
        self.trace.limit = self.trace.limit or "tokens"
        self._finish(None, None)

    def _finish(self, sql: str | None, ending: str | None) -> None:
        self.final_sql, self.ending, self.phase, self.pending = sql, ending, "done", ""

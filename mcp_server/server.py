"""The MCP server: the read-only database tools, `ask_database` on the text-to-SQL agent, a schema overview."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    DiscoverResult,
    InputRequiredResult,
    RequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types import Tool as MCPTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError

from dbtools.access.rules import VisibilityRules
from dbtools.engines import Database, QueryResult, TableInfo
from dbtools.errors import (
    ConnectionFailedError,
    DatabaseBusyError,
    DatabaseToolError,
    QueryError,
    QueryTimeoutError,
    UnknownObjectError,
    UnsafeQueryError,
)
from dbtools.name_hints import unknown_name_hint
from dbtools.plural import counted
from dbtools.schema_search import search_schema
from dbtools.sources import Source, SourceSet, UnknownSourceError
from dbtools.value_search import ValueIndex
from mcp_server.agent import RoundEvent
from mcp_server.agent.errors import ModelError, PolicyConfigError
from mcp_server.agent.policies import MODEL_SETUP_HINT
from mcp_server.audit_log import AuditLog
from mcp_server.call_audit import audited, current_call
from mcp_server.client_presence import ClientLeft, run_while_client_waits
from mcp_server.identities import Identities, current_identity, identity_of
from mcp_server.model_runner import ModelLoadError, ModelRunner
from mcp_server.server_models import (
    AskAnswer,
    ColumnDetail,
    ForeignKeyDetail,
    QueryPlan,
    QueryRows,
    SchemaMatches,
    SourceList,
    TableDescription,
    TableList,
    TableSummary,
    ValueMatch,
    ValueMatches,
)
from mcp_server.settings import Settings
from mcp_server.source_tools import (
    SourceArgument,
    server_instructions,
    server_limits,
    source_summaries,
    without_source,
)
from mcp_server.tool_schemas import input_schema, result_schema
from mcp_server.untrusted import fence, render_rows
from model.serving.cancel import CancelEvent, Cancelled

log = logging.getLogger(__name__)

SERVER_NAME = "sqlscout"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# What each kind of database error is, in words: the client reads these, not the classes' names.
ERROR_SUMMARIES = (
    (UnsafeQueryError, "Refused by the read-only policy:"),
    (QueryTimeoutError, "Timed out:"),
    (UnknownObjectError, "Not found:"),
    (QueryError, "The database rejected the query:"),
    (ConnectionFailedError, "The database cannot be reached:"),
    (DatabaseBusyError, "The database is busy:"),
)
# run_query without max_rows: a result of about 2,000 tokens.
DEFAULT_RESULT_ROWS = 50
DEFAULT_RESULT_CHARS = 6_000
# A count scans a whole table or runs a view's query: one listing spends at most this long counting, and
# the tables it has no time left for show an unknown row count.
COUNT_BUDGET_S = 3.0
# Listings and descriptions remembered until the schema or the data changes (see ScoutTools._remembered).
MAX_REMEMBERED_RESULTS = 256
OVERVIEW_URI = "schema://overview"
# The destructive and idempotent hints mean something only for tools that are not read-only (MCP spec).
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def structured(content: BaseModel | dict[str, Any], summary: str, body: str) -> CallToolResult:
    """A tool result: `content` as structured content (a dict is already JSON-ready), its readable form fenced
    as untrusted text."""
    return CallToolResult(
        content=[TextContent(type="text", text=fence(summary, body))],
        structured_content=content if isinstance(content, dict) else content.model_dump(mode="json"),
    )


def error_summary(error: DatabaseToolError) -> str:
    """What kind of failure a database error is, as the first line of the tool's error text."""
    return next((text for kind, text in ERROR_SUMMARIES if isinstance(error, kind)), "Database error:")


@contextmanager
def database_errors() -> Iterator[None]:
    """Turn the database layer's errors into tool errors whose text (possibly echoing data) is fenced; a source
    argument that names no source is the caller's mistake, said as such (it echoes only configured names)."""
    try:
        yield
    except UnknownSourceError as error:
        raise ToolError(f"Invalid source argument: {error}") from error
    except DatabaseToolError as error:
        raise ToolError(fence(error_summary(error), str(error))) from error


@contextmanager
def name_hints(db: Database, sql: str) -> Iterator[None]:
    """A query the engine rejected for an unknown table or column also names the catalog's closest ones."""
    try:
        yield
    except QueryError as error:
        hint = unknown_name_hint(db, sql, str(error))
        if not hint:
            raise
        raise QueryError(f"{error}\n{hint}") from error


def argument_errors(tool: str, error: ValidationError) -> str:
    """The arguments a tool refused, one clause each, without pydantic's model names and help links."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}" for e in error.errors()
    )
    return f"Error executing tool {tool}: invalid arguments: {problems}"


def package_version() -> str:
    """The installed package's version; from a source checkout that is not installed, pyproject.toml's."""
    try:
        return importlib.metadata.version(SERVER_NAME)
    except importlib.metadata.PackageNotFoundError:
        found = (
            re.search(r'(?m)^version\s*=\s*"([^"]+)"', PYPROJECT.read_text()) if PYPROJECT.is_file() else None
        )
        return found.group(1) if found else "0+unknown"


class ScoutServer(MCPServer):
    """The SDK's server, with argument errors reworded for the client and a compact tool list that publishes
    each tool's result type as its output schema."""

    def __init__(
        self,
        *args: Any,
        result_types: dict[str, type[BaseModel]],
        sources: SourceSet,
        audit: AuditLog | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._result_types = result_types
        self._tool_list: list[MCPTool] | None = None
        self._sources = sources
        self._audit = audit
        self._lowlevel_server.add_request_handler("server/discover", RequestParams, self._discover)

    async def _discover(self, ctx: Any, params: RequestParams) -> DiscoverResult:
        """The SDK's `server/discover` reply, but with the capabilities `initialize` gives: the server sends no
        list-change or resource-update notifications, in either protocol era (the SDK would advertise both
        where it serves `subscriptions/listen`)."""
        return DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=self._lowlevel_server.get_capabilities(),
            instructions=self.instructions,
        )

    async def list_tools(self) -> list[MCPTool]:
        if self._tool_list is None:
            self._tool_list = [
                tool.model_copy(
                    update={
                        "input_schema": input_schema(tool.input_schema),
                        "output_schema": result_schema(self._result_types[tool.name])
                        if tool.name in self._result_types
                        else None,
                    }
                )
                for tool in await super().list_tools()
            ]
        return self._tool_list

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        names = self._sources.names
        source = arguments.get("source") or (names[0] if len(names) == 1 else None)
        identity = identity_of(context)
        token = current_identity.set(identity)
        try:
            call = partial(self._call_tool, name, arguments, context)
            return await audited(self._audit, name, dict(arguments), identity, source, call)
        finally:
            current_identity.reset(token)

    async def read_resource(self, uri: Any, context: Context | None = None) -> Any:
        token = current_identity.set(identity_of(context))
        try:
            return await super().read_resource(uri, context)
        finally:
            current_identity.reset(token)

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None
    ) -> CallToolResult | InputRequiredResult:
        names = self._sources.names
        asked = arguments.get("source")
        if len(names) == 1 and asked is not None and asked != names[0]:
            # With one database the tools take no source, and a client's extra argument would be dropped: an
            # assistant that believes it queries another database must hear that it does not.
            served = next(iter(self._sources)).display_name
            raise ToolError(
                f"Invalid source argument: unknown source {asked!r}; this server serves one database, "
                f"{names[0]!r} ({served}): leave source out"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ValidationError):
                # The SDK logs a ValidationError cause by field names only: keep it as the cause.
                raise ToolError(argument_errors(name, error.__cause__)) from error.__cause__
            raise


def row_count(db: Database, info: TableInfo, deadline: float | None = None) -> int | None:
    """The table's row count or estimate (Database.row_count), None when counting would pass the `deadline`
    (time.monotonic())."""
    timeout_s = db.timeout_s if deadline is None else min(db.timeout_s, deadline - time.monotonic())
    return db.row_count(info, timeout_s=timeout_s)


def value_match_line(match: ValueMatch) -> str:
    """One match as a line: where the value lives, how it is spelled, which keys lead to and from it."""
    line = (
        f"{match.table}.{match.column} ({match.match_type}, {counted(match.matching_rows, 'row')}): "
        + ", ".join(repr(v) for v in match.values)
    )
    if match.row_keys:
        line += "; row keys " + ", ".join(f"{k}={v!r}" for k, v in match.row_keys.items())
    if match.foreign_keys:
        line += "; joins " + ", ".join(match.foreign_keys)
    return line


def table_summary(db: Database, info: TableInfo, deadline: float | None = None) -> TableSummary:
    return TableSummary(
        name=info.name,
        column_count=len(info.columns),
        row_count=row_count(db, info, deadline),
        description=info.comment,
    )


class SourceState:
    """What the tools keep for one source: its value index and the results a repeat call may reuse."""

    def __init__(self, source: Source, extra: VisibilityRules | None) -> None:
        self.source = source
        self.extra = extra  # the calling identity's own rules
        self.values: ValueIndex | None = None
        self.index_lock = threading.Lock()
        # Finished listings and descriptions with the catalog state they were built in: a repeat call costs the
        # state's check (a schema marker and a data marker) instead of rebuilding and counting.
        self.results: tuple[object, dict[tuple, CallToolResult]] = (None, {})


class ScoutTools:
    """The tool implementations, over the served sources and one model runner."""

    def __init__(
        self, settings: Settings, sources: SourceSet, runner: ModelRunner, identities: Identities
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.runner = runner
        self.identities = identities
        self._states: dict[tuple[str, VisibilityRules | None], SourceState] = {}
        self._states_lock = threading.Lock()

    def _state(self, name: str | None) -> SourceState:
        """The named source's state (the only source's for None), new when the source was reopened."""
        with database_errors():
            source = self.sources.get(name, visible=self._visible)
        extra = self.identities.rules_of(current_identity.get())
        key = (source.name, extra)
        with self._states_lock:
            state = self._states.get(key)
            if state is None or state.source is not source:
                state = self._states[key] = SourceState(source, extra)
            return state

    def _visible(self, source: str) -> bool:
        """Whether the calling identity may use `source`."""
        return self.identities.allows(current_identity.get(), source)

    @contextmanager
    def _database(self, state: SourceState) -> Iterator[Database]:
        """The source's database for one call, its errors turned into tool errors."""
        with database_errors(), state.source.calls(state.extra) as db:
            yield db

    def _remembered(
        self, state: SourceState, key: tuple, build: Callable[[Database], tuple[CallToolResult, bool]]
    ) -> CallToolResult:
        """The result `build` made for `key` in the current catalog state, else a new one; `build` says whether its
        result may be kept (not when a row count is unknown)."""
        with self._database(state) as db:
            catalog = db.catalog_state()
        held_state, results = state.results
        if catalog is not None and held_state == catalog and key in results:
            return results[key]
        result, keep = build(db)
        if catalog is not None and keep:
            if held_state != catalog:
                results = {}
                state.results = (catalog, results)
            if len(results) < MAX_REMEMBERED_RESULTS:
                results[key] = result
        return result

    def _opened(self, name: str | None) -> Database:
        state = self._state(name)
        with database_errors():
            return state.source.database(state.extra)

    def list_sources(self) -> CallToolResult:
        """The databases served (engine, description, table count, reachable now) and ask_database's model."""
        visible = [source for source in self.sources if self._visible(source.name)]
        extra = self.identities.rules_of(current_identity.get())
        result = SourceList(sources=source_summaries(visible, extra), model=self.runner.status)
        lines = [
            f"{s.name} ({s.engine}"
            + (f", {counted(s.table_count, 'table')})" if s.reachable else f", unreachable: {s.error})")
            + (f": {s.description}" if s.description else "")
            + (f"\n  warning: {s.warning}" if s.warning else "")
            for s in result.sources
        ]
        # The model's state is the server's own word: outside the fence that marks database content.
        summary = f"{counted(len(result.sources), 'source')}; ask_database's model: {result.model}."
        return structured(result, summary, "\n".join(lines))

    def list_tables(
        self,
        pattern: Annotated[str | None, Field(description="substring or glob, e.g. 'order*'")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 200,
        source: SourceArgument = None,
    ) -> CallToolResult:
        """List tables with their column and row counts; pattern filters by substring or glob."""
        state = self._state(source)
        return self._remembered(
            state, ("list_tables", pattern, limit), partial(self._list_tables, pattern, limit)
        )

    def _list_tables(self, pattern: str | None, limit: int, db: Database) -> tuple[CallToolResult, bool]:
        with database_errors():
            tables = db.tables()
        if pattern:
            needle = pattern.lower()
            glob = any(ch in needle for ch in "*?[")
            tables = [
                t
                for t in tables
                if (fnmatch.fnmatch(t.name.lower(), needle) if glob else needle in t.name.lower())
            ]
        deadline = time.monotonic() + COUNT_BUDGET_S
        result = TableList(
            tables=[table_summary(db, t, deadline) for t in tables[:limit]],
            total=len(tables),
            truncated=len(tables) > limit,
        )
        lines = [
            f"{t.name} ({counted(t.column_count, 'column')}, "
            + (counted(t.row_count, "row") if t.row_count is not None else "? rows")
            + ")"
            + (f": {t.description}" if t.description else "")
            for t in result.tables
        ]
        more = f"; showing {limit}, narrow with a pattern" if result.truncated else ""
        complete = all(t.row_count is not None for t in result.tables)
        return structured(result, f"{counted(result.total, 'table')}{more}.", "\n".join(lines)), complete

    def describe_table(
        self,
        table: Annotated[str, Field(description="schema.table outside public")],
        source: SourceArgument = None,
    ) -> CallToolResult:
        """One table's columns, types, keys, foreign keys both ways and CREATE TABLE."""
        state = self._state(source)
        return self._remembered(state, ("describe_table", table), partial(self._describe_table, table))

    def _describe_table(self, table: str, db: Database) -> tuple[CallToolResult, bool]:
        with database_errors():
            info = db.table(table)
            referenced_by = sorted(
                t.name for t in db.tables() if any(fk.ref_table == info.name for fk in t.foreign_keys)
            )
        result = TableDescription(
            name=info.name,
            description=info.comment,
            row_count=row_count(db, info),
            columns=[
                ColumnDetail(
                    name=c.name,
                    type=c.type,
                    nullable=c.nullable,
                    primary_key=c.primary_key,
                    comment=c.comment,
                )
                for c in info.columns
            ],
            foreign_keys=[
                ForeignKeyDetail(
                    columns=list(fk.columns), ref_table=fk.ref_table, ref_columns=list(fk.ref_columns)
                )
                for fk in info.foreign_keys
            ],
            referenced_by=referenced_by,
            create_sql=info.create_sql,
        )
        body = info.create_sql + (f"\nreferenced by: {', '.join(referenced_by)}" if referenced_by else "")
        return structured(result, f"Table {info.name}:", body), result.row_count is not None

    def search_schema(
        self,
        keywords: Annotated[str, Field(min_length=1)],
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        source: SourceArgument = None,
    ) -> CallToolResult:
        """Find the tables and columns whose names, types or comments match keywords."""
        with self._database(self._state(source)) as db:
            try:
                matches = search_schema(db, keywords, limit=limit)
            except ValueError as error:
                raise ToolError(f"search_schema: {error}") from error
        result = SchemaMatches(keywords=keywords, matches=[m.to_dict() for m in matches])
        body = "\n".join(
            (f"{m.table}.{m.column} {m.type or ''}" if m.column else f"table {m.table}")
            + (f" -- {m.comment}" if m.comment else "")
            + f" (matched: {', '.join(m.matched)})"
            for m in result.matches
        )
        found = counted(len(result.matches), "matching table or column", "matching tables and columns")
        return structured(result, f"{found}.", body or "(none)")

    def search_values(
        self,
        text: Annotated[str, Field(min_length=1, description="as the user wrote it, e.g. 'new york'")],
        table: Annotated[str | None, Field()] = None,
        column: Annotated[str | None, Field(description="needs table")] = None,
        source: SourceArgument = None,
    ) -> CallToolResult:
        """Find which columns store a literal and how it is spelled there (any case, partial, typos)."""
        if column and not table:
            raise ToolError("search_values: give the table as well when you give a column")
        state = self._state(source)
        with self._database(state) as db:
            try:
                matches = self._value_index(state, db).search(text, table=table, column=column)
            except ValueError as error:
                raise ToolError(f"search_values: {error}") from error
        result = ValueMatches(text=text, matches=[m.to_dict() for m in matches])
        body = "\n".join(value_match_line(m) for m in result.matches)
        holding = counted(len(result.matches), "column holds", "columns hold")
        return structured(result, f"{holding} values close to the text.", body or "(none)")

    @staticmethod
    def _value_index(state: SourceState, db: Database) -> ValueIndex:
        """The source's value index, opened on first use (building it reads every text column once)."""
        with state.index_lock:
            if state.values is None:
                state.values = ValueIndex(db)
            return state.values

    def sample_rows(
        self,
        table: str,
        limit: Annotated[int, Field(ge=1, le=100)] = 5,
        source: SourceArgument = None,
    ) -> CallToolResult:
        """The first rows of a table."""
        state = self._state(source)
        with self._database(state) as db:
            info = db.table(table)
            return self._rows_result(db.table_rows(info, min(limit, state.source.max_rows)))

    def run_query(
        self,
        sql: Annotated[str, Field(min_length=1, description="one read-only SELECT")],
        max_rows: Annotated[int | None, Field(ge=1)] = None,
        source: SourceArgument = None,
    ) -> CallToolResult:
        """Run one read-only query; without max_rows the result is cut near 2,000 tokens."""
        state = self._state(source)
        cap = state.source.max_rows
        with self._database(state) as db, name_hints(db, sql):
            if max_rows is not None:
                result = db.query(sql, max_rows=min(max_rows, cap))
                if max_rows > cap and result.truncated and result.row_count == cap:
                    result.truncation = self._capped(db, cap, max_rows, sql, result)
                return self._rows_result(result)
            result = db.query(sql, max_rows=min(DEFAULT_RESULT_ROWS, cap), max_chars=DEFAULT_RESULT_CHARS)
            if result.truncated:
                result.truncation = self._left_out(db, cap, sql, result)
            return self._rows_result(result)

    def explain_query(
        self,
        sql: Annotated[str, Field(min_length=1, description="one read-only SELECT")],
        source: SourceArgument = None,
    ) -> CallToolResult:
        """The engine's plan for a query, without running it."""
        with self._database(self._state(source)) as db, name_hints(db, sql):
            plan = QueryPlan(sql=sql, plan=db.explain(sql))
        return structured(plan, f"Plan ({db.dialect} EXPLAIN):", plan.plan)

    @staticmethod
    def _capped(db: Database, cap: int, asked: int, sql: str, result: QueryResult) -> str:
        """The closing line of a result cut at the server's cap below the max_rows asked for."""
        total = db.count_rows(sql, timeout_s=min(COUNT_BUDGET_S, db.timeout_s))
        left = f"{total - result.row_count:,} more rows" if total is not None else "more rows"
        return (
            f"{left} left out: max_rows {asked:,} is above this source's cap of {cap:,} rows (--max-rows, "
            "SQLSCOUT_MAX_ROWS, or max_rows in the configuration file); get the rest with LIMIT/OFFSET, a narrower "
            "WHERE, or aggregate in SQL"
        )

    @staticmethod
    def _left_out(db: Database, cap: int, sql: str, result: QueryResult) -> str:
        """The closing line of a result cut at the default caps: how many rows it left out, how to get them."""
        total = db.count_rows(sql, timeout_s=min(COUNT_BUDGET_S, db.timeout_s))
        left = f"{total - result.row_count:,} more rows" if total is not None else "more rows"
        return (
            f"{left} left out to keep the result near 2,000 tokens; get them with max_rows (at most "
            f"{cap:,}) or LIMIT/OFFSET, or aggregate in SQL"
        )

    def _rows_result(self, result: QueryResult) -> CallToolResult:
        rows = result.to_dict()
        del rows["sql"]  # the caller's own statement: echoing it costs context and says nothing new
        more = f"; {rows['truncation']}" if rows["truncation"] else ""
        summary = f"{counted(rows['row_count'], 'row')} in {rows['elapsed_ms']:.0f} ms{more}."
        header = " | ".join(
            f"{name} ({kind})" if kind else name
            for name, kind in zip(rows["columns"], rows["column_types"], strict=True)
        )
        return structured(rows, summary, "\n".join([header, *result.lines]))

    async def ask_database(
        self,
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
        db = self._opened(source)  # an unreachable source fails before the question waits for its turn
        cancel = CancelEvent()

        def on_round(event: RoundEvent) -> None:
            if cancel.is_set():
                return
            message = f"round {event.round} of {event.max_rounds}: {counted(len(event.calls), 'tool call')}"
            try:
                anyio.from_thread.run(ctx.report_progress, event.round, event.max_rounds, message)
            except Exception:
                log.debug("progress notification not delivered", exc_info=True)

        ask = partial(self.runner.ask, question, evidence, database=db, on_round=on_round, cancel=cancel)
        try:
            answer = await run_while_client_waits(ctx, ask, cancel, self.runner.threads)
        except ClientLeft as error:
            raise ToolError(f"ask_database stopped: {error}") from error
        except (PolicyConfigError, ModelLoadError, ModelError) as error:
            log.debug("ask_database failed", exc_info=True)  # the SDK logs the message, in one line
            raise ToolError(f"{error}\nThe other tools work without a model.") from error
        except Cancelled as error:
            raise ToolError(f"ask_database was cancelled: {error}") from error
        except DatabaseToolError as error:
            raise ToolError(fence("ask_database failed:", str(error))) from error
        answer_data = answer.to_dict()
        record = current_call.get()
        if record is not None:
            record.queries = agent_queries(answer_data)
        result = ask_answer(answer_data)
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

    def ask_database_unavailable(self, question: Annotated[str, Field(pattern=r"\S")]) -> CallToolResult:
        """Not enabled: start the server with --model DIR or --endpoint URL to answer questions in plain
        language."""
        raise ToolError(
            f"no text-to-SQL model is configured: {MODEL_SETUP_HINT}\nThe other tools work without a model."
        )

    def schema_overview(self, named: bool) -> str:
        """Markdown: one line per table with its row count and a one-line description; a section per source when
        the sources are `named`. The only source's failure fails the overview; one of several is noted in it."""
        sections = []
        for source in self.sources:
            if not self._visible(source.name):
                continue
            try:
                sections.append(self._overview(source.name, named))
            except ToolError as error:
                if not named:
                    raise
                sections.append(f"# Source {source.name}: cannot be read now\n\n{error}")
        return fence(f"Schema overview; ask_database's model: {self.runner.status}.", "\n\n".join(sections))

    def _overview(self, name: str, named: bool) -> str:
        state = self._state(name)
        with self._database(state) as db:
            tables = db.tables()
            title = f"source {name}: {db.display_name}" if named else db.display_name
            lines = [f"# Tables of {title} ({db.dialect}, {counted(len(tables), 'table')})", ""]
            deadline = time.monotonic() + COUNT_BUDGET_S
            for info in tables:
                rows = row_count(db, info, deadline)
                count = counted(rows, "row") if rows is not None else "row count unknown"
                about = info.comment or "columns: " + ", ".join(c.name for c in info.columns[:8]) + (
                    ", ..." if len(info.columns) > 8 else ""
                )
                lines.append(f"- **{info.name}** ({count}): {about}")
        return "\n".join(lines)


def agent_queries(answer: dict) -> list[str]:
    """The SQL of every query the agent's episodes ran (run and explained), in order, the answer's last."""
    queries = [
        call["args"]["sql"]
        for record in answer["trace"]["rounds"]
        for call in record["calls"]
        if isinstance(call.get("args"), dict) and isinstance(call["args"].get("sql"), str)
    ]
    if answer.get("sql") and (not queries or queries[-1] != answer["sql"]):
        queries.append(answer["sql"])
    return queries


def ask_answer(answer: dict) -> AskAnswer:
    """The agent's answer as the tool's result type, with one trace line per tool call."""
    trace = [
        f"round {record['index']}: {call['tool']} {json.dumps(call['args'], ensure_ascii=False)}"
        + (f" -> error: {call['error']}" if call.get("error") else "")
        for record in answer["trace"]["rounds"]
        for call in record["calls"]
    ]
    fields = {name: answer.get(name) for name in AskAnswer.model_fields if name in answer}
    return AskAnswer(**{**fields, "trace": trace})


def build_server(
    settings: Settings,
    served: Database | SourceSet,
    runner: ModelRunner | None = None,
    named: bool | None = None,
    audit: AuditLog | None = None,
    identities: Identities | None = None,
) -> MCPServer:
    """The MCP server for `settings` on one open database or a set of sources; `runner` (default: one for the
    settings' model) answers questions. Tools take a `source` argument when the sources are `named` (default:
    when there are several); list_sources is published either way. Every call is written to `audit` if given;
    `identities` (default: --token's, if set) decide which sources each caller may use."""
    sources = served if isinstance(served, SourceSet) else SourceSet.serving(served, server_limits(settings))
    named = len(sources) > 1 if named is None else named
    runner = runner or ModelRunner(settings)
    identities = identities or Identities(token=settings.token)
    tools = ScoutTools(settings, sources, runner, identities)
    result_types: dict[str, type[BaseModel]] = {}
    server = ScoutServer(
        SERVER_NAME,
        instructions=server_instructions(sources, named, runner.configured, identities.restricted),
        result_types=result_types,
        sources=sources,
        audit=audit,
        version=package_version(),
        log_level=settings.log_level,
    )
    ask = (tools.ask_database, AskAnswer) if runner.configured else (tools.ask_database_unavailable, None)
    # list_sources answers with one source too: an assistant's habit of asking first works everywhere.
    for tool, result_type in (
        (tools.list_sources, SourceList),
        ask,
        (tools.list_tables, TableList),
        (tools.describe_table, TableDescription),
        (tools.search_schema, SchemaMatches),
        (tools.search_values, ValueMatches),
        (tools.sample_rows, QueryRows),
        (tools.run_query, QueryRows),
        (tools.explain_query, QueryPlan),
    ):
        # One line: a docstring's line breaks and indentation are the source's, not the text's.
        description = " ".join(tool.__doc__.split())
        server.add_tool(
            tool if named else without_source(tool),
            name=tool.__name__.removesuffix("_unavailable"),
            description=description,
            annotations=READ_ONLY,
        )
        if result_type is not None:
            result_types[tool.__name__] = result_type

    @server.resource(
        OVERVIEW_URI,
        name="schema_overview",
        mime_type="text/markdown",
        description="Every table with its row count and a one-line description",
    )
    async def schema_overview() -> str:
        return await anyio.to_thread.run_sync(tools.schema_overview, named)

    return server

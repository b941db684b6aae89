"""The MCP server's wiring: the SDK server subclass, the tools of mcp_server/tools/ bound to their context, and
build_server, which publishes them and the schema overview over the served sources."""

from __future__ import annotations

import importlib.metadata
import re
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    DiscoverResult,
    InputRequiredResult,
    RequestParams,
    ToolAnnotations,
)
from mcp_types import Tool as MCPTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from dbtools.engines import Database
from dbtools.sources import SourceSet
from mcp_server.audit_log import AuditLog
from mcp_server.call_audit import audited
from mcp_server.identities import Identities, current_identity, identity_of
from mcp_server.model_runner import ModelRunner
from mcp_server.server_models import (
    AskAnswer,
    QueryPlan,
    QueryRows,
    SchemaMatches,
    SourceList,
    TableDescription,
    TableList,
    ValueMatches,
)
from mcp_server.settings import Settings
from mcp_server.source_tools import server_instructions, server_limits, without_source
from mcp_server.tool_schemas import input_schema, result_schema
from mcp_server.tools.ask_database import ask_database, ask_database_unavailable
from mcp_server.tools.context import ToolContext
from mcp_server.tools.describe_table import describe_table
from mcp_server.tools.explain_query import explain_query
from mcp_server.tools.list_sources import list_sources
from mcp_server.tools.list_tables import list_tables
from mcp_server.tools.run_query import run_query
from mcp_server.tools.sample_rows import sample_rows
from mcp_server.tools.schema_overview import OVERVIEW_URI, schema_overview
from mcp_server.tools.search_schema import search_schema
from mcp_server.tools.search_values import search_values

SERVER_NAME = "sqlscout"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# The destructive and idempotent hints mean something only for tools that are not read-only (MCP spec).
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


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
                f"Error executing tool {name}: Invalid source argument: unknown source {asked!r}; this server "
                f"serves one database, {names[0]!r} ({served}): leave source out"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ValidationError):
                # The SDK logs a ValidationError cause by field names only: keep it as the cause.
                raise ToolError(argument_errors(name, error.__cause__)) from error.__cause__
            raise


class ScoutTools(ToolContext):
    """The tool context with every tool as a method: bound to the context, a tool's signature loses its first
    parameter and is the one the server publishes, under the function's name and docstring."""

    list_sources = list_sources
    ask_database = ask_database
    ask_database_unavailable = ask_database_unavailable
    list_tables = list_tables
    describe_table = describe_table
    search_schema = search_schema
    search_values = search_values
    sample_rows = sample_rows
    run_query = run_query
    explain_query = explain_query
    schema_overview = schema_overview


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

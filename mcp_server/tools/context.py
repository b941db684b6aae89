"""The object every tool is given: the served sources, the model runner, the callers' identities, and what the
tools keep per source between calls."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mcp_types import CallToolResult

from dbtools.access.rules import VisibilityRules
from dbtools.engines import Database
from dbtools.sources import Source, SourceSet
from dbtools.value_search import ValueIndex
from mcp_server.identities import Identities, current_identity
from mcp_server.model_runner import ModelRunner
from mcp_server.settings import Settings
from mcp_server.tools.errors import database_errors

# Listings and descriptions remembered until the schema or the data changes (see ToolContext.remembered).
MAX_REMEMBERED_RESULTS = 256


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


class ToolContext:
    """What the tools share: the served sources, the model runner, the callers' identities, each source's
    state."""

    def __init__(
        self, settings: Settings, sources: SourceSet, runner: ModelRunner, identities: Identities
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.runner = runner
        self.identities = identities
        self._states: dict[tuple[str, VisibilityRules | None], SourceState] = {}
        self._states_lock = threading.Lock()

    def state(self, name: str | None) -> SourceState:
        """The named source's state (the only source's for None), new when the source was reopened."""
        with database_errors():
            source = self.sources.get(name, visible=self.visible)
        extra = self.identities.rules_of(current_identity.get())
        key = (source.name, extra)
        with self._states_lock:
            state = self._states.get(key)
            if state is None or state.source is not source:
                state = self._states[key] = SourceState(source, extra)
            return state

    def visible(self, source: str) -> bool:
        """Whether the calling identity may use `source`."""
        return self.identities.allows(current_identity.get(), source)

    @contextmanager
    def database(self, state: SourceState) -> Iterator[Database]:
        """The source's database for one call, its errors turned into tool errors."""
        with database_errors(), state.source.calls(state.extra) as db:
            yield db

    def opened(self, name: str | None) -> Database:
        """The named source's database, opened now: a source that cannot be reached fails here."""
        state = self.state(name)
        with database_errors():
            return state.source.database(state.extra)

    def remembered(
        self, state: SourceState, key: tuple, build: Callable[[Database], tuple[CallToolResult, bool]]
    ) -> CallToolResult:
        """The result `build` made for `key` in the current catalog state, else a new one; `build` says whether its
        result may be kept (not when a row count is unknown)."""
        with self.database(state) as db:
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

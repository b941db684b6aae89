"""Named databases served together: each opened on its first use, through its own SSH tunnel if it has one."""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from dbtools.access.guarded_database import GuardedDatabase
from dbtools.access.rule_check import RulesError
from dbtools.access.rules import VisibilityRules
from dbtools.engines import Database, open_database
from dbtools.engines.dsn import parse_dsn
from dbtools.errors import ConnectionFailedError, DatabaseToolError
from dbtools.source_dsn import engine_dsn, server_address
from dbtools.ssh_tunnel import SshSettings, SshTunnel

log = logging.getLogger(__name__)

# The name a lone --dsn is served under.
DEFAULT_SOURCE = "main"


class UnknownSourceError(DatabaseToolError):
    """A call named no source when several are served, or one that is not (or no longer) configured."""


@dataclass(frozen=True)
class SourceSpec:
    """One configured database. None limits take the server's; the password never appears in its repr."""

    name: str
    dsn: str | None  # None: the bundled demo database
    description: str = ""
    password: str | None = field(default=None, repr=False)
    timeout: float | None = None
    max_rows: int | None = None
    pool_size: int | None = None
    connect_timeout: int | None = None
    ssh: SshSettings | None = None
    rules: VisibilityRules = VisibilityRules()
    # Why the source cannot be opened though the server serves the others (a password variable not set where the
    # server was started); None when it can.
    unusable: str | None = None

    @property
    def engine(self) -> str:
        return parse_dsn(self.dsn).engine if self.dsn else "sqlite"

    @property
    def display_name(self) -> str:
        """The DSN with any password masked, and the tunnel it goes through."""
        shown = parse_dsn(self.dsn).display_name if self.dsn else "the bundled demo database"
        return f"{shown} (SSH via {self.ssh.display_name})" if self.ssh else shown


@dataclass(frozen=True)
class ServerLimits:
    """The server-wide limits a source's own settings override."""

    timeout: float
    max_rows: int
    pool_size: int
    connect_timeout: int


class Source:
    """A SourceSpec's database, opened on the first call that needs it; a dropped tunnel is reopened."""

    def __init__(
        self, spec: SourceSpec, limits: ServerLimits, on_close: Callable[[Database], None] | None = None
    ) -> None:
        self.spec = spec
        self.limits = limits
        self._on_close = on_close
        self._lock = threading.Lock()
        self._database: Database | None = None  # under the source's own rules, if it has any
        # The same connections under the source's rules and a caller's further ones, per set of further rules.
        self._views: dict[VisibilityRules, Database] = {}
        self._tunnel = SshTunnel(spec.ssh, *server_address(spec.dsn)) if spec.ssh else None

    @property
    def name(self) -> str:
        return self.spec.name

    @classmethod
    def serving(
        cls, database: Database, limits: ServerLimits, on_close: Callable[[Database], None] | None = None
    ) -> Source:
        """An already open database as the source named DEFAULT_SOURCE."""
        source = cls(SourceSpec(DEFAULT_SOURCE, None), limits, on_close)
        source._database = database
        return source

    @property
    def display_name(self) -> str:
        return self._database.display_name if self._database is not None else self.spec.display_name

    @property
    def dialect(self) -> str:
        """The sqlglot dialect, which is also the engine's name."""
        return self._database.dialect if self._database is not None else self.spec.engine

    @property
    def max_rows(self) -> int:
        """The most rows a call on this source returns."""
        return self.spec.max_rows or self.limits.max_rows

    @property
    def is_open(self) -> bool:
        return self._database is not None

    def database(self, extra: VisibilityRules | None = None) -> Database:
        """The open database, seen under the source's rules and `extra` ones (a caller's); raises
        ConnectionFailedError (TunnelDownError once after a drop) when unreachable."""
        if self.spec.unusable is not None:
            raise ConnectionFailedError(self.spec.unusable)
        with self._lock:
            if self._tunnel is not None and self._database is not None and self._tunnel.is_down():
                error = self._tunnel.down_error(ConnectionFailedError("the SSH connection closed"))
                self._tunnel.close()
                raise error
            port = self._tunnel.local_port() if self._tunnel is not None else None
            if self._database is None:
                self._database = self._open(port)
            if extra is None or not extra.active:
                return self._database
            view = self._views.get(extra)
            if view is None:
                raw = self._database._inner if isinstance(self._database, GuardedDatabase) else self._database
                view = self._checked(GuardedDatabase(raw, self.spec.rules.merged(extra), (extra,)))
                self._views[extra] = view  # type: ignore[assignment]
            return view

    def _checked(self, guarded: GuardedDatabase) -> GuardedDatabase:
        """`guarded` once its rules are checked against the catalog; a misfit is the operator's to fix, and the
        caller is told only that the source is not served (the details name what is hidden)."""
        try:
            guarded.tables()
        except RulesError as error:
            log.error("source %s: %s", self.name, error)
            raise ConnectionFailedError(
                f"source {self.name} is not served: its hidden-data rules do not fit the database (the server's "
                "log says which)"
            ) from error
        return guarded

    def check_rules(self, extra: VisibilityRules | None = None) -> None:
        """Open the source and check its rules, and `extra` ones, against its catalog; raises RulesError, or
        ConnectionFailedError when it cannot be reached."""
        try:
            self.database(extra)
        except ConnectionFailedError as error:
            if isinstance(error.__cause__, RulesError):
                raise error.__cause__ from None
            raise

    @contextmanager
    def calls(self, extra: VisibilityRules | None = None) -> Iterator[Database]:
        """The database for one tool call; a failure caused by a tunnel dropping mid-call says so in one line."""
        database = self.database(extra)
        try:
            yield database
        except ConnectionFailedError as error:
            if self._tunnel is not None and self._tunnel.is_down():
                self._tunnel.close()
                raise self._tunnel.down_error(error) from error
            raise

    def _open(self, local_port: int | None) -> Database:
        spec, limits = self.spec, self.limits
        dsn = engine_dsn(spec.dsn, spec.password, local_port) if spec.dsn else None
        database = open_database(
            dsn,
            timeout_s=spec.timeout or limits.timeout,
            max_rows=spec.max_rows or limits.max_rows,
            pool_size=spec.pool_size or limits.pool_size,
            connect_timeout_s=spec.connect_timeout or limits.connect_timeout,
            display_name=spec.display_name if (spec.password or spec.ssh) else None,
        )
        log.info("source %s opened: %s", spec.name, database.display_name)
        if not spec.rules.active:
            return database
        try:
            # Duck-typed as a Database: every tool and the agent read through it alike.
            return self._checked(GuardedDatabase(database, spec.rules))  # type: ignore[return-value]
        except ConnectionFailedError:
            database.close()
            raise

    def close(self) -> None:
        with self._lock:
            if self._database is not None:
                if self._on_close is not None:
                    for database in (self._database, *self._views.values()):
                        self._on_close(database)
                self._database.close()
                self._database = None
                self._views = {}
            if self._tunnel is not None:
                self._tunnel.close()


class SourceSet:
    """The configured sources by name, in the configuration's order; replaced as a whole on reload."""

    def __init__(self, specs: list[SourceSpec], limits: ServerLimits) -> None:
        self.limits = limits
        # Told of each database closed (a source reconfigured or removed), so that nothing keeps it.
        self.on_close: Callable[[Database], None] | None = None
        self._lock = threading.Lock()
        self._sources = {spec.name: self._source(spec) for spec in specs}
        self._removed: set[str] = set()

    def _source(self, spec: SourceSpec) -> Source:
        return Source(spec, self.limits, on_close=self._closed)

    def _closed(self, database: Database) -> None:
        if self.on_close is not None:
            self.on_close(database)

    @classmethod
    def serving(cls, database: Database, limits: ServerLimits) -> SourceSet:
        """One already open database as the only source."""
        sources = cls([], limits)
        sources._sources = {DEFAULT_SOURCE: Source.serving(database, limits, on_close=sources._closed)}
        return sources

    @property
    def names(self) -> list[str]:
        return list(self._sources)

    def __iter__(self) -> Iterator[Source]:
        return iter(list(self._sources.values()))

    def __len__(self) -> int:
        return len(self._sources)

    def get(self, name: str | None, visible: Callable[[str], bool] | None = None) -> Source:
        """The source `name` names; None is the only source when there is one. Errors list the sources. Sources
        that are not `visible` to the caller do not exist for it: not listed, not suggested, not found."""
        sources = {n: s for n, s in self._sources.items() if visible is None or visible(n)}
        if name is None:
            if len(sources) == 1:
                return next(iter(sources.values()))
            raise UnknownSourceError(
                f"several databases are served: give source, one of {', '.join(sources)}"
            )
        if name in sources:
            return sources[name]
        if name in self._removed and name not in self._sources:
            raise UnknownSourceError(
                f"source {name!r} no longer exists: it was removed from the configuration"
            )
        close = difflib.get_close_matches(name, list(sources), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownSourceError(f"unknown source {name!r}{hint} Sources: {', '.join(sources)}")

    def replace(self, specs: list[SourceSpec]) -> list[str]:
        """Serve `specs` from now on: a source whose settings changed is reopened, a removed one closed. Returns
        the names of the sources that changed, were added or were removed."""
        with self._lock:
            old = self._sources
            new: dict[str, Source] = {}
            changed = []
            for spec in specs:
                kept = old.get(spec.name)
                if kept is not None and kept.spec == spec:
                    new[spec.name] = kept
                else:
                    new[spec.name] = self._source(spec)
                    changed.append(spec.name)
            removed = [name for name in old if name not in new]
            self._removed = (self._removed | set(removed)) - set(new)
            self._sources = new
        for name in [*changed, *removed]:
            if name in old:
                old[name].close()
        return [*changed, *removed]

    def close(self) -> None:
        for source in self:
            source.close()

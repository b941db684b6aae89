"""The database layer's errors as the tools report them: the kind of failure in words, the details fenced."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from dbtools.engines import Database
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
from dbtools.sources import UnknownSourceError
from mcp_server.untrusted import fence

# What each kind of database error is, in words: the client reads these, not the classes' names.
ERROR_SUMMARIES = (
    (UnsafeQueryError, "Refused by the read-only policy:"),
    (QueryTimeoutError, "Timed out:"),
    (UnknownObjectError, "Not found:"),
    (QueryError, "The database rejected the query:"),
    (ConnectionFailedError, "The database cannot be reached:"),
    (DatabaseBusyError, "The database is busy:"),
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

"""Errors raised by the database layer; every message is meant to be shown to a user or a model as is."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """An error's first line of text, or its type's name when it has none: drivers' messages run on with context
    lines that a tool's one-line reason has no room for."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class DatabaseToolError(Exception):
    """Base class of every error the database layer reports."""


class UnsafeQueryError(DatabaseToolError):
    """The read-only policy refused a statement; the message says why."""


class QueryTimeoutError(DatabaseToolError):
    """A statement ran past its timeout and was cancelled."""

    def __init__(self, elapsed_s: float, timeout_s: float) -> None:
        super().__init__(
            f"query cancelled after {elapsed_s:.1f} s (timeout {timeout_s:g} s); "
            "narrow it with WHERE or LIMIT, or avoid large joins"
        )
        self.elapsed_s = elapsed_s
        self.timeout_s = timeout_s


class UnknownObjectError(DatabaseToolError):
    """An unknown table or column; the message names the closest matches."""


class QueryError(DatabaseToolError):
    """The engine rejected a statement; the message is the engine's own."""


class ConnectionFailedError(DatabaseToolError):
    """The database could not be opened or reached."""


class DatabaseBusyError(DatabaseToolError):
    """Every connection the server may hold is running another call; the message says how many."""


class UnparsableQueryError(UnsafeQueryError):
    """The policy could not parse a statement, so it cannot vouch for it."""

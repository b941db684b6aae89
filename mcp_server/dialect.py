"""The model writes SQLite SQL; other databases get it transpiled with sqlglot before it runs."""

from __future__ import annotations

import logging

import sqlglot

log = logging.getLogger(__name__)

MODEL_DIALECT = "sqlite"


def to_database_dialect(sql: str, dialect: str) -> str:
    """The SQL in the database's dialect; unchanged on SQLite or when sqlglot cannot read it (the engine
    then reports the error in its own words)."""
    if dialect == MODEL_DIALECT:
        return sql
    try:
        statements = sqlglot.transpile(sql, read=MODEL_DIALECT, write=dialect)
    except sqlglot.errors.SqlglotError as exc:
        log.debug("could not transpile %r to %s: %s", sql, dialect, exc)
        return sql
    return statements[0] if len(statements) == 1 else sql

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


def tables_of(sql: str) -> list[str]:
    """Tables a query reads (CTE names excluded), in order of appearance; [] when it does not parse."""
    try:
        tree = sqlglot.parse_one(sql, read=MODEL_DIALECT)
    except sqlglot.errors.SqlglotError:
        return []
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(sqlglot.exp.CTE)}
    names: list[str] = []
    for table in tree.find_all(sqlglot.exp.Table):
        name = ".".join(part for part in (table.db, table.name) if part)
        if name and name.lower() not in ctes and name not in names:
            names.append(name)
    return names

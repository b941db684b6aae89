"""The model writes SQLite SQL; other databases get it transpiled with sqlglot before it runs."""

from __future__ import annotations

import logging
import threading

import sqlglot
from sqlglot import exp

from dbtools.engines import Database
from dbtools.errors import DatabaseToolError

log = logging.getLogger(__name__)

MODEL_DIALECT = "sqlite"


def _catalog_spellings(db: Database) -> dict[str, str]:
    """Lower-case name -> catalog spelling of every table, schema and column; names spelt two ways are left
    out, since no single spelling is right for them."""
    spellings: dict[str, str] = {}
    clashes: set[str] = set()

    def add(name: str) -> None:
        key = name.lower()
        if spellings.setdefault(key, name) != name:
            clashes.add(key)

    for table in db.tables():
        for part in table.name.split("."):
            add(part)
        for column in table.columns:
            add(column.name)
    for key in clashes:
        del spellings[key]
    return spellings


class DialectTranslator:
    """Rewrites the model's SQLite SQL for the database it runs on.

    SQLite matches names case-insensitively, PostgreSQL folds unquoted names to lower case: so besides
    transpiling the syntax, every name that matches the catalog case-insensitively is written with its
    catalog spelling and quoted (`SELECT userId FROM alertlogs` -> `SELECT "userId" FROM "AlertLogs"`).
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.dialect = db.dialect
        self._spellings: dict[str, str] | None = None
        self._lock = threading.Lock()

    def _catalog(self) -> dict[str, str]:
        with self._lock:
            if self._spellings is None:
                try:
                    self._spellings = _catalog_spellings(self.db)
                except DatabaseToolError as exc:
                    log.warning("catalog unavailable, names are passed through as written: %s", exc)
                    return {}
            return self._spellings

    def __call__(self, sql: str) -> str:
        """The SQL in the database's dialect; unchanged on SQLite or when sqlglot cannot read it (the engine
        then reports the error in its own words)."""
        if self.dialect == MODEL_DIALECT:
            return sql
        try:
            trees = sqlglot.parse(sql, read=MODEL_DIALECT)
        except (sqlglot.errors.SqlglotError, RecursionError) as exc:  # RecursionError: degenerate nesting
            log.debug("could not transpile %r to %s: %s", sql, self.dialect, exc)
            return sql
        if len(trees) != 1 or trees[0] is None:
            return sql
        tree = trees[0]
        spellings = self._catalog()
        for identifier in tree.find_all(exp.Identifier):
            spelling = spellings.get(identifier.name.lower())
            if spelling is not None:
                identifier.set("this", spelling)
                identifier.set("quoted", True)
        try:
            return tree.sql(dialect=self.dialect)
        except (sqlglot.errors.SqlglotError, RecursionError) as exc:
            log.debug("could not write %r as %s: %s", sql, self.dialect, exc)
            return sql

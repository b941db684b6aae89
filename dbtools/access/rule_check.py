"""Rules checked against the real catalog when a source is opened: a hidden table or column named without a glob
must exist (a misspelt one would hide nothing), and each row filter must name a table that exists and compile on
it as a condition (a misspelt column would fail every query on the table)."""

from __future__ import annotations

from dbtools.access.rules import VisibilityRules, table_names
from dbtools.engines import Database, TableInfo
from dbtools.errors import DatabaseToolError
from dbtools.name_hints import closest_hint

_GLOB = set("*?[")


class RulesError(DatabaseToolError):
    """A source's or an identity's rules do not fit the database; the message names the configuration key."""


def check_rules(db: Database, catalog: list[TableInfo], rules: VisibilityRules) -> None:
    """Raise RulesError naming the first rule that does not fit `catalog`."""
    prefix = f"{rules.origin}." if rules.origin else ""
    names = [name.lower() for info in catalog for name in table_names(info.name)]
    for index, pattern in enumerate(rules.hidden_tables):
        if not _GLOB & set(pattern) and pattern.lower() not in names:
            raise RulesError(
                f"{prefix}hidden_tables[{index}]: no table named {pattern!r}"
                + closest_hint(pattern, [i.name for i in catalog], "tables")
            )
    for index, pattern in enumerate(rules.hidden_columns):
        table, _, column = pattern.rpartition(".")
        if _GLOB & set(pattern):
            continue
        info = _table(catalog, table)
        if info is None:
            raise RulesError(
                f"{prefix}hidden_columns[{index}]: no table named {table!r}"
                + closest_hint(table, [i.name for i in catalog], "tables")
            )
        if column.lower() not in {c.name.lower() for c in info.columns}:
            raise RulesError(
                f"{prefix}hidden_columns[{index}]: {info.name} has no column {column!r}"
                + closest_hint(column, [c.name for c in info.columns], "columns")
            )
    for table, condition in rules.row_filters:
        key = f"{prefix}row_filters.{table}"
        info = _table(catalog, table)
        if info is None:
            raise RulesError(
                f"{key}: no table named {table!r}" + closest_hint(table, [i.name for i in catalog], "tables")
            )
        statement = f"SELECT 1 FROM {db.table_reference(info.name).sql(dialect=db.dialect)} WHERE {condition}"
        problem = db._compile_error(statement)
        if problem:
            columns = ", ".join(c.name for c in info.columns)
            raise RulesError(
                f"{key}: the condition {condition!r} does not run on {info.name} ({columns}): {problem}"
            )


def _table(catalog: list[TableInfo], pattern: str) -> TableInfo | None:
    wanted = pattern.lower()
    return next(
        (info for info in catalog if any(n.lower() == wanted for n in table_names(info.name))),
        None,
    )

"""What an episode needed to find, read from the gold SQL: its tables and the string literals it filters on."""

from __future__ import annotations

import sqlglot
from sqlglot import exp


def _parse(sql: str, dialect: str) -> exp.Expression | None:
    try:
        return sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return None


def table_key(name: str) -> str:
    """Tables compare by their last name part, case-insensitively ("Sales.Orders" and "orders" match)."""
    return name.strip('"`[]').rsplit(".", 1)[-1].strip('"`[]').lower()


def gold_tables(sql: str, dialect: str = "sqlite") -> set[str]:
    """The tables the gold SQL reads (CTE names excluded), as table keys; empty when it does not parse."""
    tree = _parse(sql, dialect)
    if tree is None:
        return set()
    cte_names = {cte.alias.lower() for cte in tree.find_all(exp.CTE)}
    return {table_key(table.name) for table in tree.find_all(exp.Table)} - cte_names


def gold_literals(sql: str, dialect: str = "sqlite") -> list[str]:
    """The string literals the answer depends on: those compared with data in a predicate.

    A literal elsewhere (a strftime format, a constant in the select list) is not something the model had to
    find in the database, so it is left out. LIKE patterns are kept as written; see literal_seen.
    """
    tree = _parse(sql, dialect)
    if tree is None:
        return []
    literals = []
    for literal in tree.find_all(exp.Literal, bfs=False):
        if not literal.is_string or not literal.this:
            continue
        parent = literal.parent
        while isinstance(parent, (exp.Paren, exp.Tuple)):
            parent = parent.parent
        if isinstance(parent, exp.Predicate) and literal.this not in literals:
            literals.append(literal.this)
    return literals


def literal_seen(literal: str, outputs_text: str) -> bool:
    """True when every fixed part of the literal (split at LIKE's %) occurs in the outputs, ignoring case."""
    haystack = outputs_text.lower()
    parts = [part for part in literal.lower().split("%") if part]
    return bool(parts) and all(part in haystack for part in parts)

"""The functions a query may call: one reviewed allow list per dialect (functions/<dialect>.txt). A function is
checked by the name the engine will be sent, as the query is generated for that dialect, so a name sqlglot knows
by another (SQLite's IFNULL, MySQL's LOCATE) is checked as the engine knows it."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sqlglot import exp

LISTS = Path(__file__).with_name("functions")
# The name a generated call starts with: `NAME(` (quoted or not); other forms (CASE, x::int, {'a': 1}) are syntax.
_CALLED = re.compile(r'\s*"?([A-Za-z_][A-Za-z0-9_$]*)"?\s*\(')
# Syntax that sqlglot keeps as function nodes and generates like calls: subquery tests and value constructors.
_SYNTAX = frozenset({"exists", "any", "all", "some", "array", "row"})


@functools.cache
def allowed_functions(dialect: str) -> frozenset[str]:
    """The lower-case names on `dialect`'s list."""
    lines = (LISTS / f"{dialect}.txt").read_text().splitlines()
    return frozenset(line.strip().lower() for line in lines if line.strip() and not line.startswith("#"))


def called_name(node: exp.Func, dialect: str) -> str | None:
    """The lower-case name `node` is sent to the engine as; None when it is generated as syntax, not a call."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    # Generated with each argument that holds a call replaced by a literal, so that a deep query costs one pass,
    # not one per level, and without comments, which could stand before the name.
    try:
        generated = _without_nested_calls(node).sql(dialect=dialect, comments=False)
    except Exception:  # a generator that needs the real arguments: judge the node by sqlglot's own names
        return type(node).sql_names()[0].lower() if type(node).sql_names() else type(node).__name__.lower()
    found = _CALLED.match(generated)
    if found is None or found.group(1).lower() in _SYNTAX:
        return None
    return found.group(1).lower()


def _without_nested_calls(node: exp.Func) -> exp.Func:
    """A copy of `node` whose arguments holding a call are the literal 1: its own name is generated the same."""
    args = {}
    for key, value in node.args.items():
        if isinstance(value, list):
            args[key] = [_literal_if_calling(v) for v in value]
        else:
            args[key] = _literal_if_calling(value)
    return type(node)(**args)


def _literal_if_calling(value: object) -> object:
    if isinstance(value, exp.Expression) and value.find(exp.Func) is not None:
        return exp.Literal.number(1)
    return value.copy() if isinstance(value, exp.Expression) else value


def function_refusal(node: exp.Func, dialect: str) -> str | None:
    """Why the query may not call `node`, or None when it may."""
    if isinstance(node.parent, exp.Dot) and node.parent.expression is node:
        return (
            f"{node.parent.sql(dialect=dialect)[:60]} calls a function through a schema or a value: call the "
            "built-in by its bare name"
        )
    name = called_name(node, dialect)
    if name is None or name in allowed_functions(dialect):
        return None
    return (
        f"function {name}() is not allowed: queries may call only built-in functions that compute on the values "
        f"they are given (the list: dbtools/access/functions/{dialect}.txt)"
    )

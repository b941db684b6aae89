"""A query plan as rules let it be shown: the operators and the tables they read, without row estimates, costs,
filter or join conditions, or index names (an index may be named after a hidden column; estimates and costs
count the rows a filter drops)."""

from __future__ import annotations

import json
import re

from dbtools.engines import Database

# SQLite: "SEARCH t USING INDEX idx (a=?)" -> "SEARCH t USING INDEX".
_SQLITE_INDEX = re.compile(r"\b(USING (?:COVERING |PRIMARY KEY |INTEGER PRIMARY KEY )?INDEX)\b\s*\S*")
_SQLITE_DETAIL = re.compile(r"\s*\([^()]*\)")
# The columns of MySQL's tabular EXPLAIN that say what runs, not how many rows or which index.
_MYSQL_SHAPE_COLUMNS = ("id", "select_type", "table", "type")


def plan_shape(db: Database, sql: str, timeout_s: float) -> str:
    """The shape of the plan of `sql` (a statement this program generated and checked), as indented text."""
    if db.dialect == "postgres":
        [(plan,)] = list(db.stream("EXPLAIN (FORMAT JSON, COSTS FALSE) " + sql, timeout_s=timeout_s))
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return "\n".join(_tree(plan[0]["Plan"], "Plans", _postgres_node))
    if db.dialect == "duckdb":
        rows = list(db.stream("EXPLAIN (FORMAT JSON) " + sql, timeout_s=timeout_s))
        return "\n".join(
            line
            for _, plan in rows
            for node in json.loads(plan)
            for line in _tree(node, "children", _duckdb_node)
        )
    if db.dialect == "sqlite":
        steps = list(db.stream("EXPLAIN QUERY PLAN " + sql, timeout_s=timeout_s))
        depth = {0: -1}
        lines = []
        for step, parent, _unused, detail in steps:
            depth[step] = depth.get(parent, -1) + 1
            shown = _SQLITE_DETAIL.sub("", _SQLITE_INDEX.sub(r"\1", detail))
            lines.append("  " * depth[step] + shown)
        return "\n".join(lines)
    # MySQL 8 has a partitions column before type; MariaDB has none.
    keep = (0, 1, 2, 3) if getattr(db, "is_mariadb", True) else (0, 1, 2, 4)
    rows = list(db.stream("EXPLAIN " + sql, timeout_s=timeout_s))
    return "\n".join(" | ".join(str(row[i]) for i in keep) for row in [_MYSQL_SHAPE_COLUMNS, *rows])


def _tree(node: dict, children: str, label, depth: int = 0) -> list[str]:
    lines = ["  " * depth + label(node)]
    for child in node.get(children, []):
        lines += _tree(child, children, label, depth + 1)
    return lines


def _postgres_node(node: dict) -> str:
    relation = node.get("Relation Name")
    return node["Node Type"] + (f" on {relation}" if relation else "")


def _duckdb_node(node: dict) -> str:
    table = (node.get("extra_info") or {}).get("Table")
    return node["name"] + (f" on {table}" if table else "")

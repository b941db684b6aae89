"""Command line for the database tools: `python -m dbtools [--dsn DSN] TOOL [ARGS...] [--json]`."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence

import configargparse

from dbtools.agent_tools import AgentToolbox
from dbtools.engines import Database, QueryResult, open_database
from dbtools.engines.results import cell_text
from dbtools.errors import DatabaseToolError
from dbtools.plural import counted
from dbtools.query_limits import DEFAULT_QUERY_LIMITS
from dbtools.schema_search import search_schema
from dbtools.value_search import ValueIndex

_TOOL_HELP = {
    "list_tables": "every table name",
    "describe_table": "a table's CREATE TABLE statement",
    "foreign_keys": "foreign keys out of and into a table",
    "join_path": "the shortest foreign-key path between two tables",
    "sample_rows": "the first rows of a table",
    "distinct_values": "a column's most frequent distinct values",
    "run_query": "a read-only query, as the model sees it (header and first 5 rows)",
    "submit_sql": "a read-only query, as the model's final answer",
    "query": "a read-only query with every row, the row count, truncation and timing",
    "search_values": "which columns of which tables hold a value (exact, case-insensitive, partial, fuzzy)",
    "search_schema": "tables and columns whose names or comments match keywords",
}


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value <= 0:  # a NaN timeout would never expire
            raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _common_options(suppress: bool) -> configargparse.ArgumentParser:
    """Options accepted before or after the tool name (after it, they override the ones before).

    Only the copy before the tool name reads the variables: the copy after it would read them again and
    override a flag given before the tool name.
    """
    parser = configargparse.ArgumentParser(add_help=False)

    def setting(flag: str, env_var: str, default: object = None, **kwargs: object) -> None:
        if suppress:
            parser.add_argument(flag, default=argparse.SUPPRESS, **kwargs)
        else:
            parser.add_argument(flag, default=default, env_var=env_var, **kwargs)

    setting(
        "--dsn",
        "SQLSCOUT_DSN",
        help="a SQLite or DuckDB file, CSV/Parquet/JSON files or a folder of them, sqlite:///path, "
        "duckdb:///path, postgresql://..., a libpq string or mysql://user@host/db "
        "(default: the bundled demo database)",
    )
    setting(
        "--timeout",
        "SQLSCOUT_TIMEOUT",
        DEFAULT_QUERY_LIMITS.timeout_s,
        type=_positive(float),
        metavar="SECONDS",
        help=f"statement timeout (default {DEFAULT_QUERY_LIMITS.timeout_s:g})",
    )
    setting(
        "--max-rows",
        "SQLSCOUT_MAX_ROWS",
        DEFAULT_QUERY_LIMITS.max_rows,
        type=_positive(int),
        metavar="N",
        help=f"row cap per query (default {DEFAULT_QUERY_LIMITS.max_rows})",
    )
    setting(
        "--max-chars",
        "SQLSCOUT_MAX_CHARS",
        DEFAULT_QUERY_LIMITS.max_chars,
        type=_positive(int),
        metavar="N",
        help=f"character cap per query result (default {DEFAULT_QUERY_LIMITS.max_chars})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print JSON instead of text",
    )
    setting(
        "--log-level",
        "SQLSCOUT_LOG_LEVEL",
        "WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level on stderr (default WARNING)",
    )
    setting(
        "--cache-dir",
        "SQLSCOUT_CACHE_DIR",
        metavar="DIR",
        help="where the demo database and value indexes live (default ~/.cache/sqlscout)",
    )
    return parser


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m dbtools",
        description="Read-only database tools over SQLite, PostgreSQL, MySQL/MariaDB and DuckDB.",
        parents=[_common_options(suppress=False)],
    )
    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    after = [_common_options(suppress=True)]

    def tool(name: str, help_text: str) -> argparse.ArgumentParser:
        return tools.add_parser(name, help=help_text, description=help_text, parents=after)

    tool("list_tables", _TOOL_HELP["list_tables"])
    for name in ("describe_table", "foreign_keys"):
        tool(name, _TOOL_HELP[name]).add_argument("table_name", metavar="TABLE")
    join = tool("join_path", _TOOL_HELP["join_path"])
    join.add_argument("table_a", metavar="TABLE_A")
    join.add_argument("table_b", metavar="TABLE_B")
    sample = tool("sample_rows", _TOOL_HELP["sample_rows"])
    sample.add_argument("table_name", metavar="TABLE")
    sample.add_argument(
        "limit", metavar="LIMIT", nargs="?", type=int, help="rows to show (default 5, at most 50)"
    )
    distinct = tool("distinct_values", _TOOL_HELP["distinct_values"])
    distinct.add_argument("table_name", metavar="TABLE")
    distinct.add_argument("column_name", metavar="COLUMN")
    distinct.add_argument(
        "limit", metavar="LIMIT", nargs="?", type=int, help="values to show (default 10, at most 100)"
    )
    for name in ("run_query", "submit_sql", "query"):
        tool(name, _TOOL_HELP[name]).add_argument(
            "sql", metavar="SQL", help="the query; - reads it from stdin"
        )
    values = tool("search_values", _TOOL_HELP["search_values"])
    values.add_argument("text", metavar="TEXT")
    values.add_argument("--table", help="only this table")
    values.add_argument("--column", help="only this column")
    values.add_argument("--limit", type=_positive(int), default=10, help="columns to show (default 10)")
    values.add_argument(
        "--no-fuzzy", action="store_true", help="exact, case-insensitive and partial matches only"
    )
    schema = tool("search_schema", _TOOL_HELP["search_schema"])
    schema.add_argument("keywords", metavar="KEYWORD", nargs="+")
    schema.add_argument("--limit", type=_positive(int), default=20, help="matches to show (default 20)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    # sqlglot warns about every statement it cannot parse; the refusal message already says why.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    if args.cache_dir:
        os.environ["SQLSCOUT_CACHE_DIR"] = args.cache_dir  # read by the demo database and the value index
    if getattr(args, "sql", None) == "-":
        args.sql = sys.stdin.read()
    try:
        db = open_database(args.dsn, timeout_s=args.timeout, max_rows=args.max_rows, max_chars=args.max_chars)
    except DatabaseToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        return _run(db, args)
    finally:
        db.close()


def _run(db: Database, args: argparse.Namespace) -> int:
    if args.tool in ("search_values", "search_schema"):
        try:
            matches = _search(db, args)
        except DatabaseToolError as exc:
            return _fail(str(exc), args.json)
        if args.json:
            print(json.dumps([m.to_dict() for m in matches], indent=2))
        else:
            print("\n".join(_render_match(m) for m in matches) if matches else "no matches")
        return 0
    if args.tool == "query":
        try:
            result = db.query(args.sql)
        except DatabaseToolError as exc:
            return _fail(str(exc), args.json)
        print(json.dumps(result.to_dict(), indent=2) if args.json else _render_query(result))
        return 0
    tool_args = {
        k: getattr(args, k)
        for k in ("table_name", "column_name", "table_a", "table_b", "sql", "limit")
        if getattr(args, k, None) is not None
    }
    output = AgentToolbox(db).call(args.tool, tool_args)
    if args.json:
        print(json.dumps(output.to_dict(), indent=2))
    elif output.error is None:
        print(output.text)
    if output.error is not None:
        print(f"error: {output.error}", file=sys.stderr)
        return 1
    return 0


def _search(db: Database, args: argparse.Namespace) -> list:
    if args.tool == "search_schema":
        return search_schema(db, args.keywords, limit=args.limit)
    return ValueIndex(db).search(
        args.text, table=args.table, column=args.column, limit=args.limit, fuzzy=not args.no_fuzzy
    )


def _render_match(match: object) -> str:
    """One line per match: where it is, how it matched, and (for values) the matching values."""
    data = match.to_dict()
    if "values" in data:
        where = f"{data['table']}.{data['column']}"
        values, rows = counted(data["matching_values"], "value"), counted(data["matching_rows"], "row")
        found = f"{data['match_type']}; {values} in {rows}"
        return f"{where} ({found}): {', '.join(data['values'])}"
    where = (
        data["table"] if data["column"] is None else f"{data['table']}.{data['column']} {data['type'] or ''}"
    )
    comment = f" -- {data['comment']}" if data.get("comment") else ""
    return f"{where.strip()} ({data['kind']}; matched {', '.join(data['matched'])}){comment}"


def _fail(message: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": message}, indent=2))
    print(f"error: {message}", file=sys.stderr)
    return 1


def _render_query(result: QueryResult) -> str:
    lines = [" | ".join(result.columns)]
    lines += [" | ".join(cell_text(v) for v in row) for row in result.rows]
    summary = f"({counted(result.row_count, 'row')}, {result.elapsed_ms:.1f} ms"
    lines.append(summary + (f"; truncated: {result.truncation})" if result.truncated else ")"))
    return "\n".join(lines)

"""The text-to-SQL model's eight tools, with the output formats of the agent protocol."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from dbtools.engines import Database, QueryResult, TableInfo
from dbtools.engines.results import cell_text
from dbtools.errors import DatabaseToolError, QueryTimeoutError, UnknownObjectError
from dbtools.foreign_key_graph import ForeignKeyGraph
from dbtools.safety import referenced_tables

logger = logging.getLogger(__name__)

AGENT_TOOL_NAMES = (
    "list_tables",
    "describe_table",
    "foreign_keys",
    "join_path",
    "sample_rows",
    "distinct_values",
    "run_query",
    "submit_sql",
)

PREVIEW_ROWS = 5
MORE_ROWS_LINE = f"... (showing first {PREVIEW_ROWS} rows; more rows exist)"
SAMPLE_ROWS_DEFAULT, SAMPLE_ROWS_MAX = 5, 50
DISTINCT_VALUES_DEFAULT, DISTINCT_VALUES_MAX = 10, 100
# A hub table (users, employees) can be referenced by dozens of tables; the model's context is small.
MAX_INCOMING_REFERENCES = 15
# Ranking distinct values by frequency scans the whole column; past this it falls back to plain DISTINCT.
FREQUENCY_RANKING_TIMEOUT_S = 2.0

# tool -> (required arguments, optional arguments)
_SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "list_tables": ((), ()),
    "describe_table": (("table_name",), ()),
    "foreign_keys": (("table_name",), ()),
    "join_path": (("table_a", "table_b"), ()),
    "sample_rows": (("table_name",), ("limit",)),
    "distinct_values": (("table_name", "column_name"), ("limit",)),
    "run_query": (("sql",), ()),
    "submit_sql": (("sql",), ()),
}


@dataclass
class ToolOutput:
    text: str  # exactly what the model sees
    tables: tuple[str, ...]  # tables the call touched
    error: str | None = None  # set when the call failed; text then carries the message
    result: QueryResult | None = None  # run_query / submit_sql / sample_rows / distinct_values when SQL ran

    def to_dict(self) -> dict:
        """JSON-ready form, the result included."""
        return {
            "text": self.text,
            "tables": list(self.tables),
            "error": self.error,
            "result": self.result.to_dict() if self.result else None,
        }


class _BadArguments(Exception):
    """The model's arguments do not fit the tool."""


class AgentToolbox:
    """Runs the model's tool calls against one database; never raises for bad input from the model."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._handlers: dict[str, Callable[..., ToolOutput]] = {
            name: getattr(self, f"_{name}") for name in AGENT_TOOL_NAMES
        }

    def call(self, tool: str, args: dict) -> ToolOutput:
        """Run one tool call; failures come back as a ToolOutput with `error` set."""
        touched: tuple[str, ...] = ()
        try:
            arguments = _validate(tool, args)
            touched = self._tables_named(tool, arguments)
            return self._handlers[tool](**arguments)
        except _BadArguments as exc:
            return ToolOutput(text=str(exc), tables=(), error=str(exc))
        except DatabaseToolError as exc:
            return ToolOutput(text=str(exc), tables=touched, error=str(exc))
        except Exception as exc:  # the episode must go on whatever one call hits
            logger.exception("tool %s failed", tool)
            message = f"{tool} failed: {exc}"
            return ToolOutput(text=message, tables=touched, error=message)

    def _tables_named(self, tool: str, arguments: dict) -> tuple[str, ...]:
        """Existing tables a call names, reported even when the call then fails."""
        if tool in ("run_query", "submit_sql"):
            return self._tables_in(arguments["sql"])
        names = [arguments[k] for k in ("table_name", "table_a", "table_b") if k in arguments]
        return tuple(dict.fromkeys(t.name for t in map(self._find_table, names) if t is not None))

    def _find_table(self, name: str) -> TableInfo | None:
        try:
            return self.db.table(name)
        except UnknownObjectError:
            return None

    def _tables_in(self, sql: str) -> tuple[str, ...]:
        found = (self._find_table(n) for n in referenced_tables(sql, self.db.dialect))
        return tuple(dict.fromkeys(t.name for t in found if t is not None))

    # --- the tools -----------------------------------------------------------------------------------------
    def _list_tables(self) -> ToolOutput:
        names = [t.name for t in self.db.tables()]
        count = f"({len(names)} table{'' if len(names) == 1 else 's'})"
        return ToolOutput(text=f"{', '.join(names)} {count}" if names else count, tables=())

    def _describe_table(self, table_name: str) -> ToolOutput:
        table = self.db.table(table_name)
        text = " ".join(table.create_sql.split())
        notes = _comment_statements(table, self.db)
        return ToolOutput(text="; ".join([text, *notes]), tables=(table.name,))

    def _foreign_keys(self, table_name: str) -> ToolOutput:
        table = self.db.table(table_name)
        graph = ForeignKeyGraph(self.db.tables())
        lines = [
            f"{', '.join(r.columns)} -> {r.ref_table}({', '.join(r.ref_columns)})"
            for r in graph.outgoing(table.name)
        ]
        incoming = graph.incoming(table.name)
        lines += [
            f"{', '.join(r.ref_columns)} <- {r.table}({', '.join(r.columns)})"
            for r in incoming[:MAX_INCOMING_REFERENCES]
        ]
        if len(incoming) > MAX_INCOMING_REFERENCES:
            lines.append(f"... ({len(incoming) - MAX_INCOMING_REFERENCES} more references into {table.name})")
        text = "\n".join(lines) if lines else f"no foreign keys in or out of {table.name}"
        return ToolOutput(text=text, tables=(table.name,))

    def _join_path(self, table_a: str, table_b: str) -> ToolOutput:
        start, goal = self.db.table(table_a), self.db.table(table_b)
        path = ForeignKeyGraph(self.db.tables()).shortest_path(start.name, goal.name)
        if path is None:
            return ToolOutput(
                text=f"no foreign-key path between {start.name} and {goal.name}",
                tables=(start.name, goal.name),
            )
        return ToolOutput(text=" → ".join(path), tables=tuple(path))

    def _sample_rows(self, table_name: str, limit: object = SAMPLE_ROWS_DEFAULT) -> ToolOutput:
        table = self.db.table(table_name)
        count = _limit("sample_rows", limit, SAMPLE_ROWS_MAX)
        result = self.db.table_rows(table, count)
        return ToolOutput(text=_render_rows(result, len(result.rows)), tables=(table.name,), result=result)

    def _distinct_values(
        self, table_name: str, column_name: str, limit: object = DISTINCT_VALUES_DEFAULT
    ) -> ToolOutput:
        table = self.db.table(table_name)
        column = table.column(column_name)
        count = _limit("distinct_values", limit, DISTINCT_VALUES_MAX)
        source, col = self.db.quote(table.name), self.db.quote(column.name)
        by_frequency = (
            f"SELECT {col} FROM {source} GROUP BY {col} ORDER BY COUNT(*) DESC, {col} LIMIT {count + 1}"
        )
        try:
            timeout = min(self.db.timeout_s, FREQUENCY_RANKING_TIMEOUT_S)
            result = self.db.query(by_frequency, max_rows=count + 1, timeout_s=timeout)
        except QueryTimeoutError:
            result = self.db.query(
                f"SELECT DISTINCT {col} FROM {source} LIMIT {count + 1}", max_rows=count + 1
            )
        lines = [cell_text(row[0]) for row in result.rows[:count]]
        if len(result.rows) > count:
            lines.append(f"... (showing first {count} distinct values; more exist)")
        if not lines:
            lines = [f"no values in {table.name}.{column.name}"]
        return ToolOutput(text="\n".join(lines), tables=(table.name,), result=result)

    def _run_query(self, sql: str) -> ToolOutput:
        result = self.db.query(sql)
        return ToolOutput(text=_render_rows(result, PREVIEW_ROWS), tables=self._tables_in(sql), result=result)

    def _submit_sql(self, sql: str) -> ToolOutput:
        return self._run_query(sql)


def _render_rows(result: QueryResult, shown: int) -> str:
    """Header and rows joined by ' | ', NULL as None; a last line says when rows were left out."""
    lines = [" | ".join(result.columns)]
    lines += [" | ".join(cell_text(v) for v in row) for row in result.rows[:shown]]
    if len(result.rows) > shown or (result.truncated and len(result.rows) == shown):
        lines.append(f"... (showing first {shown} rows; more rows exist)")
    elif result.truncated:
        lines.append(f"... ({result.truncation})")
    return "\n".join(lines)


def _comment_statements(table: TableInfo, db: Database) -> list[str]:
    """COMMENT ON statements for the table's and its columns' comments, where the engine keeps them apart from
    the CREATE TABLE text (PostgreSQL, DuckDB)."""
    if db.create_sql_has_comments:
        return []
    name = db.quote(table.name)
    notes = []
    if table.comment:
        notes.append(f"COMMENT ON TABLE {name} IS {_literal(table.comment)}")
    for column in table.columns:
        if column.comment:
            notes.append(f"COMMENT ON COLUMN {name}.{db.quote(column.name)} IS {_literal(column.comment)}")
    return [" ".join(n.split()) for n in notes]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _validate(tool: object, args: object) -> dict:
    if not isinstance(tool, str) or tool not in _SIGNATURES:
        raise _BadArguments(f'unknown tool "{tool}"; the tools are: {", ".join(AGENT_TOOL_NAMES)}')
    required, optional = _SIGNATURES[tool]
    expected = ", ".join([*required, *(f"{o} (optional)" for o in optional)]) or "no arguments"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _BadArguments(f"{tool}: arguments must be a JSON object (expected: {expected})")
    args = {
        k: v for k, v in args.items() if not (k in optional and v is None)
    }  # null means "use the default"
    for name in required:
        if name not in args:
            raise _BadArguments(f'{tool}: missing argument "{name}" (expected: {expected})')
    for name in args:
        if name not in required and name not in optional:
            raise _BadArguments(f'{tool}: unexpected argument "{name}" (expected: {expected})')
    for name in required:
        if not isinstance(args[name], str) or not args[name].strip():
            raise _BadArguments(f'{tool}: argument "{name}" must be a non-empty string')
    return dict(args)


def _limit(tool: str, value: object, maximum: int) -> int:
    """A row limit from the model: a whole number (or its text) from 1 up, capped at `maximum`."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+").isdigit():
        number = int(value)
    if number is None or number < 1:
        raise _BadArguments(f"{tool}: limit must be a whole number from 1 to {maximum}, got {value!r}")
    return min(number, maximum)

"""A query's result, and its cells as the tools print them (text) and return them (JSON)."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

# Values that are text in JSON too: their str().
_TEXT_TYPES = (datetime.date, datetime.datetime, datetime.time, datetime.timedelta, uuid.UUID)
# Cells whose str() is their text (cell_text's own fallback), rendered without its checks.
PLAIN_TEXT_TYPES = {str, int, float, bool, type(None), decimal.Decimal, *_TEXT_TYPES}
# JSON scalars as they are (so are finite floats).
_JSON_NATIVE = {str, int, bool, type(None)}
# SQLite's storage classes, by the Python type its values arrive as.
_STORED_TYPES = {int: "integer", float: "real", str: "text", bytes: "blob"}


@dataclass
class QueryResult:
    sql: str
    columns: list[str]
    rows: list[tuple]
    row_count: int
    truncated: bool
    elapsed_ms: float
    truncation: str | None = None  # why rows were left out, with a hint to narrow the query
    lines: list[str] = field(default_factory=list)  # each row as text (row_text)
    column_types: list[str | None] = field(default_factory=list)  # per column; None where unknown

    def to_dict(self) -> dict:
        """JSON-ready form: cells become JSON scalars (dates and decimals as text, bytes as hex)."""
        return {
            "sql": self.sql,
            "columns": list(self.columns),
            "column_types": list(self.column_types),
            "rows": _json_rows(self.rows),
            "row_count": self.row_count,
            "truncated": self.truncated,
            "truncation": self.truncation,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }


def _json_rows(rows: Sequence[tuple]) -> list[list]:
    """The rows with every cell a JSON scalar, converted a column at a time (most columns hold one type):
    columns whose cells already are JSON scalars are kept as they are."""
    columns = list(zip(*rows, strict=True))
    converted = [_json_column(column) for column in columns]
    if all(column is None for column in converted):
        return [list(row) for row in rows]
    return [
        list(row)
        for row in zip(
            *(old if new is None else new for old, new in zip(columns, converted, strict=True)), strict=True
        )
    ]


def _json_column(column: Sequence[object]) -> list | None:
    """A column's cells as JSON scalars; None when they already are."""
    kinds = set(map(type, column))
    if float not in kinds:
        if kinds <= _JSON_NATIVE:
            return None
    elif kinds <= _JSON_NATIVE | {float} and all(math.isfinite(v) for v in column if type(v) is float):
        return None
    others = kinds - {type(None)}
    convert = _JSON_BY_TYPE.get(others.pop()) if len(others) == 1 else None
    if convert is not None:  # one type besides NULL, as a typed engine gives: no checks per cell
        return [None if v is None else convert(v) for v in column]
    return [_json_cell(v) for v in column]


def _json_decimal(value: decimal.Decimal) -> object:
    if not value.is_finite():
        return str(value)
    return int(value) if value == value.to_integral_value() else float(value)


def _json_cell(value: object) -> object:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN or Infinity
    if isinstance(value, decimal.Decimal):
        return _json_decimal(value)
    return cell_text(value)


# Types whose JSON form one function gives.
_JSON_BY_TYPE = {decimal.Decimal: _json_decimal, **dict.fromkeys(_TEXT_TYPES, str)}


def stored_type(rows: Sequence[tuple], column: int) -> str | None:
    """A column's type as its first non-NULL value shows it, for engines whose results carry no types."""
    value = next((row[column] for row in rows if row[column] is not None), None)
    return None if value is None else _STORED_TYPES.get(type(value), type(value).__name__)


def row_text(row: Sequence[object]) -> str:
    """A row as the tools print it: its cells' text joined by " | "."""
    # str() already is the text of most cells (None included); only the rest take cell_text's checks.
    return " | ".join([str(v) if type(v) in PLAIN_TEXT_TYPES else cell_text(v) for v in row])


def cell_text(value: object) -> str:
    """A cell as the tools print it: NULL as None, bytes as hex, JSON and arrays as JSON, else str()."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)

"""Execution accuracy: compare a predicted query's result rows with the gold query's (BIRD convention)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any


def normalise_value(value: Any) -> Any:
    """Map a cell to a hashable value that compares equal across engines and Python types.

    SQLite returns dates as text while PostgreSQL returns date objects, and numeric columns come back as
    Decimal from PostgreSQL: both are mapped to what SQLite would give so a correct query is not failed
    on representation alone. Integers and floats already compare equal in Python (1 == 1.0).
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return tuple(normalise_value(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), normalise_value(v)) for k, v in value.items()))
    return value


def normalise_rows(rows: Iterable[Sequence[Any]]) -> set[tuple]:
    """The set of rows, each cell normalised: order and duplicates do not count (BIRD convention)."""
    return {tuple(normalise_value(cell) for cell in row) for row in rows}


def results_match(predicted: Iterable[Sequence[Any]], gold: Iterable[Sequence[Any]]) -> bool:
    """True when both queries return the same set of rows; column order inside a row does count."""
    return normalise_rows(predicted) == normalise_rows(gold)

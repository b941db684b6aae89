"""Query results as an aligned plain-text table for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_CELL = 60


def cell(value: Any) -> str:
    text = "NULL" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, numbers right-aligned, a rule under the header."""
    cells = [[cell(v) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) for i in range(len(columns))
    ]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        )
        return "  ".join(padded).rstrip()

    return "\n".join([line(list(columns)), "  ".join("-" * w for w in widths), *(line(r) for r in cells)])

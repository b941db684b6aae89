"""The row cap and the character cap on a query's result: what is kept, where it stops and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dbtools.engines.results import PLAIN_TEXT_TYPES, cell_text, row_text
from dbtools.plural import counted


@dataclass
class ResultCaps:
    """Collects a result's rows up to the row cap and the character cap, and says why it stopped."""

    max_rows: int
    max_chars: int
    collected: list[tuple] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # each kept row as text, rendered once
    chars: int = 0
    truncation: str | None = None
    clipped: bool = False  # the first row alone was over the character cap and its long values were cut

    def add_rows(self, rows: Sequence[tuple]) -> bool:
        """add() each of `rows` in turn, False once the result must stop; rows well within both caps are kept
        without add()'s checks one by one."""
        room = self.max_rows - len(self.collected)
        collected, lines, budget = self.collected, self.lines, self.max_chars - 1
        for row in rows[:room] if len(rows) > room else rows:
            # row_text's rendering, inlined: this loop runs once per row of every result.
            line = " | ".join([str(v) if type(v) in PLAIN_TEXT_TYPES else cell_text(v) for v in row])
            if self.chars + len(line) > budget:
                if not self.add(row):  # the character cap, or a first row over it alone, in add()'s words
                    return False
                continue
            collected.append(row)
            lines.append(line)
            self.chars += len(line) + 1
        return len(rows) <= room or self.add(rows[room])

    def add(self, row: tuple) -> bool:
        """Keep `row` if it fits under the caps; False once the result must stop here."""
        if len(self.collected) >= self.max_rows:
            self.truncation = (
                f"stopped at {counted(self.max_rows, 'row')} (row cap); "
                "add a LIMIT or a narrower WHERE to see the rest"
            )
            return False
        # Values are capped by the engines (SQLite's length limit, PostgreSQL's cut in the query), so rendering
        # a row before knowing that it fits costs at most one such value.
        line = row_text(row)
        if self.collected and self.chars + len(line) + 1 > self.max_chars:
            cut = "; long values of the first row were cut to fit" if self.clipped else ""
            self.truncation = (
                f"stopped after {counted(len(self.collected), 'row')} "
                f"at the {self.max_chars}-character cap{cut}; "
                "select fewer or shorter columns, or add a LIMIT"
            )
            return False
        if len(line) + 1 > self.max_chars:
            # The first row alone: keep it, but never let one huge value through whole.
            separators = 3 * max(len(row) - 1, 0) + 1
            row = _clip_row(row, max(self.max_chars - separators, 0))
            line = row_text(row)
            self.clipped = True
            self.truncation = (
                f"the first row alone was over the {self.max_chars}-character cap, so its long values were cut; "
                "select shorter columns, e.g. substr(column, 1, 200)"
            )
        self.collected.append(row)
        self.lines.append(line)
        self.chars += len(line) + 1
        return True


def _cell_size(value: object) -> int:
    """len(cell_text(value)), without building the text of a large blob."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 2 + 2 * len(value)
    return len(value) if isinstance(value, str) else len(cell_text(value))


def _clip_row(row: tuple, budget: int) -> tuple:
    """The row with its longest values cut to one common length, so that the row fits in `budget` characters."""
    sizes = sorted(_cell_size(v) for v in row)
    remaining = budget
    for i, size in enumerate(sizes):
        share = remaining // (len(sizes) - i)
        if size > share:
            return tuple(_clip(v, share) for v in row)
        remaining -= size
    return row


def _clip(value: object, limit: int) -> object:
    if _cell_size(value) <= limit:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)[: max(limit - 2, 0) // 2]
    return (value if isinstance(value, str) else cell_text(value))[:limit]

"""The foreign-key graph of a schema: references in and out of a table, and shortest join paths."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from dbtools.engines import ForeignKey, TableInfo


@dataclass(frozen=True)
class Reference:
    """`table`.`columns` references `ref_table`.`ref_columns`."""

    table: str
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


class ForeignKeyGraph:
    """Tables as nodes, foreign keys as edges usable in either direction."""

    def __init__(self, tables: Iterable[TableInfo]) -> None:
        tables = list(tables)
        known = {t.name.lower(): t.name for t in tables}
        self.references: list[Reference] = []
        self._neighbours: dict[str, set[str]] = {t.name: set() for t in tables}
        for table in tables:
            for key in table.foreign_keys:
                ref_table = known.get(key.ref_table.lower(), key.ref_table)
                self.references.append(_reference(table.name, key, ref_table))
                if ref_table in self._neighbours and ref_table != table.name:
                    self._neighbours[table.name].add(ref_table)
                    self._neighbours[ref_table].add(table.name)

    def outgoing(self, table: str) -> list[Reference]:
        return [r for r in self.references if r.table == table]

    def incoming(self, table: str) -> list[Reference]:
        return [r for r in self.references if r.ref_table == table and r.table != table]

    def shortest_path(self, start: str, goal: str) -> list[str] | None:
        """Breadth-first search; ties go to the alphabetically first neighbour, so answers are stable."""
        previous: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue:
            current = queue.popleft()
            if current == goal:
                path = [current]
                while (step := previous[path[-1]]) is not None:
                    path.append(step)
                return path[::-1]
            for neighbour in sorted(self._neighbours.get(current, ())):
                if neighbour not in previous:
                    previous[neighbour] = current
                    queue.append(neighbour)
        return None


def _reference(table: str, key: ForeignKey, ref_table: str) -> Reference:
    return Reference(table, key.columns, ref_table, key.ref_columns)

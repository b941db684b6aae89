"""The catalog's records of a database's tables, their columns and their foreign keys, the same on every engine."""

from __future__ import annotations

from dataclasses import dataclass

from dbtools.errors import UnknownObjectError
from dbtools.name_hints import closest_hint, lookup_name


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str
    nullable: bool
    primary_key: bool
    comment: str | None = None


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableInfo:
    name: (
        str  # as written in SQL, unquoted: "customers", or "sales.orders" outside PostgreSQL's public schema
    )
    columns: tuple[ColumnInfo, ...]
    foreign_keys: tuple[ForeignKey, ...]
    create_sql: str  # SQLite: as stored; PostgreSQL: an equivalent rendered CREATE TABLE
    comment: str | None = None
    row_estimate: int | None = None

    def column(self, name: str) -> ColumnInfo:
        """The column called `name` (case-insensitive); UnknownObjectError naming the closest matches."""
        found = lookup_name({c.name: c for c in self.columns}, name)
        if found is None:
            raise UnknownObjectError(
                f'no column "{name}" in table "{self.name}"'
                + closest_hint(name, [c.name for c in self.columns], "columns")
            )
        return found

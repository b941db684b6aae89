"""The declarative table specification language of the demo database: tables, columns, DDL styles."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ColumnSpec:
    """One column: SQL type as written in the CREATE TABLE, the value generator kind and its options."""

    name: str
    sql_type: str
    kind: str
    null_fraction: float = 0.0
    skew: float = 1.0
    unique: bool = False
    ref_table: str | None = None
    ref_column: str | None = None
    comment: str | None = None
    static_field: int | None = None

    @property
    def is_primary_key(self) -> bool:
        return self.kind == "pk"


@dataclass(frozen=True)
class TableSpec:
    """One table; `rows` is its row count at scale 1 (see row_count for other scales)."""

    name: str
    rows: int
    columns: tuple[ColumnSpec, ...]
    style: str
    fact: bool = False
    static: tuple[tuple, ...] | None = None
    comment: str | None = None
    primary_key: str = field(init=False)

    def __post_init__(self) -> None:
        keys = [c.name for c in self.columns if c.is_primary_key]
        if len(keys) != 1:
            raise ValueError(f"table {self.name} needs exactly one primary key column, has {keys}")
        object.__setattr__(self, "primary_key", keys[0])

    def row_count(self, scale: float) -> int:
        """Fact tables grow and shrink with the scale; other tables only shrink (below 1); static ones never."""
        if self.static is not None:
            return len(self.static)
        factor = scale if self.fact else min(scale, 1.0)
        return max(1, round(self.rows * factor)) if self.rows else 0

    @property
    def foreign_keys(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.ref_table is not None]


def parse_column(line: str) -> ColumnSpec:
    """Parse `name TYPE kind [null=0.1] [skew=1.2] [unique] [row:N] [# comment]`.

    Kind `->table[.col]` is a foreign key; `row:N` takes field N of the table's static rows.
    """
    text, _, comment = line.partition("#")
    name, sql_type, kind, *options = text.split()
    values: dict = {"comment": comment.strip() or None}
    for option in options:
        key, _, value = option.partition("=")
        if key == "null":
            values["null_fraction"] = float(value)
        elif key == "skew":
            values["skew"] = float(value)
        elif key.startswith("row:"):
            values["static_field"] = int(key[4:])
        elif key == "unique":
            values["unique"] = True
        else:
            raise ValueError(f"unknown column option {option!r} in {line!r}")
    if kind.startswith("->"):
        ref_table, _, ref_column = kind[2:].partition(".")
        values["ref_table"] = ref_table
        values["ref_column"] = ref_column or None
        kind = "fk"
    elif kind.startswith("row:"):
        values["static_field"] = int(kind[4:])
        kind = "static"
    return ColumnSpec(name=name, sql_type=sql_type, kind=kind, **values)


def table(
    name: str,
    rows: int,
    *columns: str,
    style: str,
    fact: bool = False,
    static=None,
    comment: str | None = None,
) -> TableSpec:
    return TableSpec(
        name=name,
        rows=rows,
        columns=tuple(parse_column(c) for c in columns),
        style=style,
        fact=fact,
        static=tuple(static) if static is not None else None,
        comment=comment,
    )


def lookup_table(
    name: str,
    key: str,
    label: str,
    labels: Iterable[str],
    *columns: str,
    style: str,
    comment: str | None = None,
) -> TableSpec:
    """A static table of one row per label: primary key `key`, unique column `label`, then `columns`.

    `label` is `name TYPE` and holds `labels` in order; `columns` are written as in `table` and generated.
    """
    return table(
        name,
        0,
        f"{key} INTEGER pk",
        f"{label} row:0 unique",
        *columns,
        style=style,
        static=[(x,) for x in labels],
        comment=comment,
    )

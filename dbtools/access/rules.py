"""Who may see what in one source: an allow-list of tables, hidden tables and columns (case-insensitive globs)
and row filters, and the catalog as it looks under them."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace

from dbtools.engines import ColumnInfo, ForeignKey, TableInfo


def _matches(patterns: tuple[str, ...], names: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name.lower(), pattern.lower()) for pattern in patterns for name in names)


def table_names(info_name: str) -> list[str]:
    """The names a pattern may match a table by: as the catalog names it and, if schema-qualified, bare."""
    bare = info_name.rsplit(".", 1)[-1]
    return [info_name] if bare == info_name else [info_name, bare]


@dataclass(frozen=True)
class VisibilityRules:
    """One source's rules; with none set, everything is visible and queries are not rewritten."""

    tables: tuple[str, ...] = ()  # the allow-list: empty means every table
    hidden_tables: tuple[str, ...] = ()
    hidden_columns: tuple[str, ...] = ()  # "table.column", either part a glob
    row_filters: tuple[tuple[str, str], ...] = ()  # (table, SQL condition on its columns)
    # Where the rules were written ("sources.hr", "identities.alice"): the key path errors about them name.
    origin: str = field(default="", compare=False, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.tables or self.hidden_tables or self.hidden_columns or self.row_filters)

    def merged(self, other: VisibilityRules) -> VisibilityRules:
        """A source's rules with an identity's on top: the identity's hide more and filter more (its allow-list, if
        any, is the source's: identities are granted sources, not tables)."""
        return VisibilityRules(
            tables=self.tables,
            hidden_tables=self.hidden_tables + other.hidden_tables,
            hidden_columns=self.hidden_columns + other.hidden_columns,
            row_filters=self.row_filters + other.row_filters,
            origin=self.origin,
        )

    def table_visible(self, name: str) -> bool:
        names = table_names(name)
        if self.tables and not _matches(self.tables, names):
            return False
        return not _matches(self.hidden_tables, names)

    def column_visible(self, table: str, column: str) -> bool:
        return not _matches(self.hidden_columns, [f"{name}.{column}" for name in table_names(table)])

    def row_filters_of(self, table: str) -> list[str]:
        """The conditions every row of `table` must meet to be seen."""
        names = [name.lower() for name in table_names(table)]
        return [condition for key, condition in self.row_filters if key.lower() in names]

    def visible_tables(self, tables: list[TableInfo], quote) -> list[TableInfo]:
        """The catalog as these rules show it: hidden tables left out, hidden columns left out of the rest,
        foreign keys to hidden tables or through hidden columns dropped, CREATE TABLE written again."""
        if not self.active:
            return tables
        shown = {info.name for info in tables if self.table_visible(info.name)}
        visible = []
        for info in tables:
            if info.name not in shown:
                continue
            columns = tuple(c for c in info.columns if self.column_visible(info.name, c.name))
            keys = tuple(
                fk
                for fk in info.foreign_keys
                if fk.ref_table in shown
                and all(self.column_visible(info.name, c) for c in fk.columns)
                and all(self.column_visible(fk.ref_table, c) for c in fk.ref_columns)
            )
            if columns == info.columns and keys == info.foreign_keys:
                visible.append(info)
                continue
            visible.append(
                replace(
                    info,
                    columns=columns,
                    foreign_keys=keys,
                    create_sql=create_table(info.name, columns, keys, quote),
                )
            )
        return visible


def create_table(name: str, columns: tuple[ColumnInfo, ...], keys: tuple[ForeignKey, ...], quote) -> str:
    """A CREATE TABLE naming only `columns` and `keys`, for a table whose own statement names hidden ones."""
    keyed = [c.name for c in columns if c.primary_key]
    lines = [f"  {quote(c.name)} {c.type}" + ("" if c.nullable else " NOT NULL") for c in columns]
    if keyed:
        lines.append(f"  PRIMARY KEY ({', '.join(quote(c) for c in keyed)})")
    lines += [
        f"  FOREIGN KEY ({', '.join(quote(c) for c in fk.columns)}) REFERENCES {fk.ref_table} "
        f"({', '.join(quote(c) for c in fk.ref_columns)})"
        for fk in keys
    ]
    qualified = ".".join(quote(part) for part in name.split("."))
    return f"CREATE TABLE {qualified} (\n" + ",\n".join(lines) + "\n)"

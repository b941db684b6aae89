"""CREATE TABLE text of the demo tables in the styles real schemas mix (SQaLe-like, inline, named, lowercase)."""

from __future__ import annotations

from dbtools.demo.spec import ColumnSpec, TableSpec
from dbtools.demo.vocabulary import ENUMS


def referenced_column(spec: ColumnSpec, tables: dict[str, TableSpec]) -> str:
    """The parent column a foreign key points at: the one named, else the parent's primary key."""
    return spec.ref_column or tables[spec.ref_table].primary_key


def render_create_table(table: TableSpec, tables: dict[str, TableSpec]) -> str:
    return _STYLES[table.style](table, tables)


def _sqale(table: TableSpec, tables: dict[str, TableSpec]) -> str:
    lines = []
    for c in table.columns:
        extra = " PRIMARY KEY NOT NULL" if c.is_primary_key else (" UNIQUE" if c.unique else "")
        lines.append(f"{c.name} {c.sql_type}{extra}")
    lines += [
        f"FOREIGN KEY ({c.name}) REFERENCES {c.ref_table}({referenced_column(c, tables)})"
        for c in table.foreign_keys
    ]
    return f"CREATE TABLE {table.name} (\n  " + ",\n  ".join(lines) + "\n)"


def _inline(table: TableSpec, tables: dict[str, TableSpec]) -> str:
    lines = []
    for c in table.columns:
        parts = [c.name, c.sql_type]
        if c.is_primary_key:
            parts.append("PRIMARY KEY")
        else:
            if c.null_fraction == 0:
                parts.append("NOT NULL")
            if c.unique:
                parts.append("UNIQUE")
            if c.kind.startswith("enum:"):
                parts.append(f"DEFAULT '{ENUMS[c.kind[5:]][0]}'")
            if c.ref_table:
                parts.append(f"REFERENCES {c.ref_table} ({referenced_column(c, tables)})")
        lines.append(" ".join(parts))
    return f"CREATE TABLE {table.name} (\n    " + ",\n    ".join(lines) + "\n)"


def _named(table: TableSpec, tables: dict[str, TableSpec]) -> str:
    lines = []
    for c in table.columns:
        required = " NOT NULL" if c.is_primary_key or c.null_fraction == 0 else " NULL"
        lines.append(f'"{c.name}" {c.sql_type}{required}')
    lines.append(f'CONSTRAINT "PK_{table.name}" PRIMARY KEY ("{table.primary_key}")')
    lines += [f'CONSTRAINT "UQ_{table.name}_{c.name}" UNIQUE ("{c.name}")' for c in table.columns if c.unique]
    lines += [
        f'CONSTRAINT "CK_{table.name}_{c.name}" CHECK ("{c.name}" >= 0)'
        for c in table.columns
        if c.kind.startswith("money:")
    ]
    lines += [
        f'CONSTRAINT "FK_{table.name}_{c.name}" FOREIGN KEY ("{c.name}") '
        f'REFERENCES "{c.ref_table}" ("{referenced_column(c, tables)}")'
        for c in table.foreign_keys
    ]
    return f'CREATE TABLE "{table.name}" (\n\t' + ",\n\t".join(lines) + "\n)"


def _lower(table: TableSpec, tables: dict[str, TableSpec]) -> str:
    lines = []
    for c in table.columns:
        parts = [c.name, c.sql_type.lower()]
        if c.is_primary_key:
            parts.append("primary key")
        elif c.null_fraction == 0:
            parts.append("not null")
        if c.unique:
            parts.append("unique")
        lines.append(" ".join(parts))
    lines += [
        f"foreign key ({c.name}) references {c.ref_table} ({referenced_column(c, tables)})"
        for c in table.foreign_keys
    ]
    return f"create table {table.name} (\n  " + ",\n  ".join(lines) + "\n)"


def _constraint(table: TableSpec, tables: dict[str, TableSpec]) -> str:
    width = max(len(c.name) for c in table.columns)
    lines = []
    for c in table.columns:
        parts = [c.name.ljust(width), c.sql_type.ljust(12)]
        parts.append(
            "NOT NULL PRIMARY KEY" if c.is_primary_key else ("NOT NULL" if c.null_fraction == 0 else "NULL")
        )
        if c.unique:
            parts.append("UNIQUE")
        lines.append(" ".join(parts))
    for c in table.foreign_keys:
        action = "CASCADE" if c.null_fraction == 0 else "SET NULL"
        lines.append(
            f"CONSTRAINT fk_{table.name}_{c.name} FOREIGN KEY ({c.name}) "
            f"REFERENCES {c.ref_table} ({referenced_column(c, tables)}) ON DELETE {action}"
        )
    return f"CREATE TABLE {table.name} (\n    " + ",\n    ".join(lines) + "\n)"


_STYLES = {"sqale": _sqale, "inline": _inline, "named": _named, "lower": _lower, "constraint": _constraint}

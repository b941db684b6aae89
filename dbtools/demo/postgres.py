"""Loads a demo SQLite database into PostgreSQL: same tables, names, rows and keys, with COPY for speed."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psycopg
from psycopg import sql
from tqdm import tqdm

from dbtools.demo.ddl import referenced_column
from dbtools.demo.domains import TABLES, TABLES_BY_NAME
from dbtools.demo.source import demo_rows, open_demo_source, sized_type
from dbtools.demo.spec import ColumnSpec, TableSpec

log = logging.getLogger(__name__)

_TYPE_MAP = {
    "INTEGER": "integer",
    "TEXT": "text",
    "REAL": "double precision",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "DATETIME": "timestamp",
}


def postgres_type(sql_type: str) -> str:
    """The PostgreSQL type for a demo column type: VARCHAR/CHAR/NUMERIC keep their modifiers."""
    sized = sized_type(sql_type)
    if sized:
        return f"{sized[0].lower()}({sized[1]})"
    return _TYPE_MAP[sql_type.upper()]


def _create_table(table: TableSpec) -> sql.Composed:
    columns = [
        sql.SQL("{} {}{}").format(
            sql.Identifier(c.name),
            sql.SQL(postgres_type(c.sql_type)),
            sql.SQL(" NOT NULL" if c.is_primary_key or c.null_fraction == 0 else ""),
        )
        for c in table.columns
    ]
    return sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table.name), sql.SQL(", ").join(columns))


def _keys(table: TableSpec) -> list[sql.Composed]:
    name = sql.Identifier(table.name)
    statements = [
        sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(name, sql.Identifier(table.primary_key))
    ]
    statements += [
        sql.SQL("ALTER TABLE {} ADD UNIQUE ({})").format(name, sql.Identifier(c.name))
        for c in table.columns
        if c.unique
    ]
    return statements


def _foreign_key(table: TableSpec, column: ColumnSpec) -> sql.Composed:
    return sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} ({})").format(
        sql.Identifier(table.name),
        sql.Identifier(column.name),
        sql.Identifier(column.ref_table),
        sql.Identifier(referenced_column(column, TABLES_BY_NAME)),
    )


def _comments(table: TableSpec) -> list[sql.Composed]:
    statements = []
    if table.comment:
        statements.append(
            sql.SQL("COMMENT ON TABLE {} IS {}").format(
                sql.Identifier(table.name), sql.Literal(table.comment)
            )
        )
    statements += [
        sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
            sql.Identifier(table.name), sql.Identifier(c.name), sql.Literal(c.comment)
        )
        for c in table.columns
        if c.comment
    ]
    return statements


def load_postgres(dsn: str, source: str | Path, *, replace: bool = False, progress: bool = True) -> int:
    """Copy every demo table of `source` into the database at `dsn` (schema public) in one transaction.

    Keys, foreign keys and indexes are added after the rows, so the load runs at COPY speed. Existing demo
    tables make it fail unless `replace` drops them first. Returns the number of rows copied.
    """
    started = time.perf_counter()
    source_conn = open_demo_source(Path(source))
    total = 0
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        existing = {
            r[0]
            for r in cur.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
        clashes = sorted(existing & set(TABLES_BY_NAME))
        if clashes and not replace:
            raise ValueError(
                f"{len(clashes)} demo tables already exist in the target (e.g. {clashes[0]}): "
                "pass --replace to drop and reload them"
            )
        for name in clashes:
            cur.execute(sql.SQL("DROP TABLE {} CASCADE").format(sql.Identifier(name)))
        for table in tqdm(TABLES, desc="copy to postgres", unit="table", disable=not progress, leave=False):
            cur.execute(_create_table(table))
            columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)
            copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table.name), columns)
            with cur.copy(copy_sql) as copy:
                for row in demo_rows(source_conn, table):
                    copy.write_row(row)
                    total += 1
        for table in TABLES:
            for statement in _keys(table) + _comments(table):
                cur.execute(statement)
        for table in TABLES:
            for column in table.foreign_keys:
                cur.execute(_foreign_key(table, column))
                cur.execute(
                    sql.SQL("CREATE INDEX ON {} ({})").format(
                        sql.Identifier(table.name), sql.Identifier(column.name)
                    )
                )
        conn.commit()
        conn.autocommit = True
        cur.execute("ANALYZE")
    source_conn.close()
    log.info("loaded %d rows into PostgreSQL in %.1f s", total, time.perf_counter() - started)
    return total

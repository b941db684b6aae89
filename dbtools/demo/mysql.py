"""Loads a demo SQLite database into MySQL or MariaDB: same tables, names, rows, keys and comments."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from tqdm import tqdm

from dbtools.demo.ddl import referenced_column
from dbtools.demo.domains import TABLES, TABLES_BY_NAME
from dbtools.demo.source import demo_rows, open_demo_source, sized_type
from dbtools.demo.spec import ColumnSpec, TableSpec
from dbtools.engines.mysql_pool import MySQLConnection, connect_args

log = logging.getLogger(__name__)

_TYPE_MAP = {
    "INTEGER": "int",
    "TEXT": "text",
    "REAL": "double",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "DATETIME": "datetime",
}
_BATCH_ROWS = 2000  # rows per multi-row INSERT (PyMySQL's executemany writes one statement per batch)


def mysql_type(sql_type: str) -> str:
    """The MySQL type for a demo column type: VARCHAR/CHAR keep their lengths, NUMERIC becomes DECIMAL."""
    sized = sized_type(sql_type)
    if sized:
        return f"{'decimal' if sized[0] == 'NUMERIC' else sized[0].lower()}({sized[1]})"
    return _TYPE_MAP[sql_type.upper()]


def _name(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def _text(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _create_table(table: TableSpec) -> str:
    columns = []
    for c in table.columns:
        required = " NOT NULL" if c.is_primary_key or c.null_fraction == 0 else ""
        comment = f" COMMENT {_text(c.comment)}" if c.comment else ""
        columns.append(f"{_name(c.name)} {mysql_type(c.sql_type)}{required}{comment}")
    columns.append(f"PRIMARY KEY ({_name(table.primary_key)})")
    columns += [f"UNIQUE ({_name(c.name)})" for c in table.columns if c.unique]
    columns += [_foreign_key(c) for c in table.foreign_keys]
    comment = f" COMMENT={_text(table.comment)}" if table.comment else ""
    return f"CREATE TABLE {_name(table.name)} ({', '.join(columns)}) DEFAULT CHARSET=utf8mb4{comment}"


def _foreign_key(column: ColumnSpec) -> str:
    parent = _name(referenced_column(column, TABLES_BY_NAME))
    return f"FOREIGN KEY ({_name(column.name)}) REFERENCES {_name(column.ref_table)} ({parent})"


def load_mysql(dsn: str, source: str | Path, *, replace: bool = False, progress: bool = True) -> int:
    """Copy every demo table of `source` into the database named by the mysql:// DSN.

    Foreign keys are declared with the tables and checked neither while the rows arrive nor after (they hold by
    construction); the tables are analysed at the end. Existing demo tables make it fail unless `replace` drops them
    first. Returns the number of rows copied.
    """
    started = time.perf_counter()
    source_conn = open_demo_source(Path(source))
    total = 0
    with MySQLConnection(**connect_args(dsn, 10)) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
        clashes = sorted({row[0] for row in cursor.fetchall()} & set(TABLES_BY_NAME))
        if clashes and not replace:
            raise ValueError(
                f"{len(clashes)} demo tables already exist in the target (e.g. {clashes[0]}): "
                "pass --replace to drop and reload them"
            )
        # Tables may then reference tables created after them, and the rows arrive without a lookup each.
        cursor.execute("SET SESSION foreign_key_checks = 0")
        for name in clashes:
            cursor.execute(f"DROP TABLE {_name(name)}")
        for table in tqdm(TABLES, desc="copy to mysql", unit="table", disable=not progress, leave=False):
            cursor.execute(_create_table(table))
            insert = f"INSERT INTO {_name(table.name)} VALUES ({', '.join(['%s'] * len(table.columns))})"
            batch: list[tuple] = []
            for row in demo_rows(source_conn, table):
                batch.append(row)
                if len(batch) == _BATCH_ROWS:
                    cursor.executemany(insert, batch)
                    total, batch = total + len(batch), []
            if batch:
                cursor.executemany(insert, batch)
                total += len(batch)
        cursor.execute("SET SESSION foreign_key_checks = 1")
        cursor.execute(f"ANALYZE TABLE {', '.join(_name(t.name) for t in TABLES)}")
        cursor.fetchall()
    source_conn.close()
    log.info("loaded %d rows into MySQL in %.1f s", total, time.perf_counter() - started)
    return total

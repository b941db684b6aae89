"""Writes a demo SQLite database into a DuckDB database file: same tables, names, rows, keys and comments.

DuckDB checks a foreign key row by row as rows arrive and cannot add one to an existing table, so a table's
references to its own rows (Employees.ManagerID, gl_accts.parent_acct_id), which point at rows further on, are
left out of the constraints.
"""

from __future__ import annotations

import csv
import logging
import tempfile
import time
from pathlib import Path

import duckdb
from tqdm import tqdm

from dbtools.demo.ddl import referenced_column
from dbtools.demo.domains import TABLES, TABLES_BY_NAME
from dbtools.demo.source import demo_rows, open_demo_source, sized_type
from dbtools.demo.spec import TableSpec

log = logging.getLogger(__name__)

_TYPE_MAP = {
    "INTEGER": "INTEGER",
    "TEXT": "VARCHAR",
    "REAL": "DOUBLE",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "DATETIME": "TIMESTAMP",
}
# NULL in the intermediate CSV files: no generated value looks like it.
_NULL = "\\N"


def duckdb_type(sql_type: str) -> str:
    """The DuckDB type for a demo column type: NUMERIC keeps its precision as DECIMAL; text lengths go."""
    sized = sized_type(sql_type)
    if sized:
        return f"DECIMAL({sized[1]})" if sized[0] == "NUMERIC" else "VARCHAR"
    return _TYPE_MAP[sql_type.upper()]


def _name(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _create_table(table: TableSpec) -> str:
    parts = []
    for c in table.columns:
        required = " NOT NULL" if c.is_primary_key or c.null_fraction == 0 else ""
        parts.append(f"{_name(c.name)} {duckdb_type(c.sql_type)}{required}")
    parts.append(f"PRIMARY KEY ({_name(table.primary_key)})")
    parts += [f"UNIQUE ({_name(c.name)})" for c in table.columns if c.unique]
    parts += [
        f"FOREIGN KEY ({_name(c.name)}) REFERENCES {_name(c.ref_table)} "
        f"({_name(referenced_column(c, TABLES_BY_NAME))})"
        for c in table.foreign_keys
        if c.ref_table != table.name
    ]
    return f"CREATE TABLE {_name(table.name)} ({', '.join(parts)})"


def _comments(table: TableSpec) -> list[str]:
    statements = [f"COMMENT ON TABLE {_name(table.name)} IS {_text(table.comment)}"] if table.comment else []
    statements += [
        f"COMMENT ON COLUMN {_name(table.name)}.{_name(c.name)} IS {_text(c.comment)}"
        for c in table.columns
        if c.comment
    ]
    return statements


def load_duckdb(path: str | Path, source: str | Path, *, replace: bool = False, progress: bool = True) -> int:
    """Write every demo table of `source` into the DuckDB file at `path` (created when missing).

    Rows travel through a CSV file per table, which DuckDB reads in bulk (binding parameters row by row is slow).
    Existing demo tables make it fail unless `replace` drops them first. Returns the number of rows copied.
    """
    started = time.perf_counter()
    source_conn = open_demo_source(Path(source))
    total = 0
    with duckdb.connect(str(path)) as conn, tempfile.TemporaryDirectory(prefix="sqlscout-demo-") as scratch:
        existing = {row[0] for row in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        clashes = sorted(existing & set(TABLES_BY_NAME))
        if clashes and not replace:
            raise ValueError(
                f"{len(clashes)} demo tables already exist in the target (e.g. {clashes[0]}): "
                "pass --replace to drop and reload them"
            )
        conn.execute("BEGIN")
        # Children before parents: a referenced table cannot go while references to it remain.
        for table in reversed(TABLES):
            if table.name in clashes:
                conn.execute(f"DROP TABLE {_name(table.name)}")
        for table in tqdm(TABLES, desc="copy to duckdb", unit="table", disable=not progress, leave=False):
            conn.execute(_create_table(table))
            rows_file = Path(scratch) / "rows.csv"
            with open(rows_file, "w", newline="", encoding="utf-8") as out:
                writer = csv.writer(out)
                for row in demo_rows(source_conn, table):
                    writer.writerow([_NULL if v is None else v for v in row])
                    total += 1
            conn.execute(
                f"COPY {_name(table.name)} FROM {_text(str(rows_file))} "
                f"(HEADER false, AUTO_DETECT false, DELIM ',', QUOTE '\"', ESCAPE '\"', NULLSTR {_text(_NULL)})"
            )
            for statement in _comments(table):
                conn.execute(statement)
        conn.execute("COMMIT")
    source_conn.close()
    log.info("loaded %d rows into DuckDB in %.1f s", total, time.perf_counter() - started)
    return total

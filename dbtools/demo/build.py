"""Builds the demo SQLite database: every table's rows generated column by column from a seed."""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from dbtools.demo.ddl import referenced_column, render_create_table
from dbtools.demo.domains import TABLES, TABLES_BY_NAME
from dbtools.demo.spec import ColumnSpec, TableSpec
from dbtools.demo.values import generate, make_unique, skewed_keys, skewed_pick

# Bump whenever the schema or the generated values change: cached demo files are keyed by it.
GENERATOR_VERSION = 1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildStats:
    path: Path
    tables: int
    rows: int
    seconds: float


def _column_values(
    table: TableSpec,
    column: ColumnSpec,
    n: int,
    seed: int,
    row_counts: dict[str, int],
    referenced: dict[tuple[str, str], list],
) -> list:
    # One generator per column, so a change to one column leaves every other column's values unchanged.
    rng = random.Random(f"{seed}:{table.name}:{column.name}")
    if column.is_primary_key:
        values = list(range(1, n + 1))
    elif column.static_field is not None:
        values = [row[column.static_field] for row in table.static]
    elif column.kind == "fk":
        parent_column = referenced_column(column, TABLES_BY_NAME)
        if parent_column == TABLES_BY_NAME[column.ref_table].primary_key:
            parents = n if column.ref_table == table.name else row_counts[column.ref_table]
            if column.unique:  # a one-to-one link: each parent at most once (see _row_count)
                values = rng.sample(range(1, parents + 1), n)
            else:
                values = skewed_keys(rng, n, parents, column.skew) if parents else [None] * n
        else:
            values = skewed_pick(rng, n, referenced[(column.ref_table, parent_column)], column.skew)
    else:
        values = generate(column.kind, rng, n, column.skew)
    if column.unique and column.kind != "fk":
        values = make_unique(values)
    if column.null_fraction:
        values = [None if rng.random() < column.null_fraction else value for value in values]
    return values


def _row_count(table: TableSpec, scale: float, row_counts: dict[str, int]) -> int:
    """Rows of `table` at `scale`; a one-to-one child never has more rows than its parent."""
    n = table.row_count(scale)
    for column in table.foreign_keys:
        if column.unique and column.ref_table != table.name:
            n = min(n, row_counts[column.ref_table])
    return n


def _referenced_columns() -> set[tuple[str, str]]:
    """(table, column) pairs that foreign keys point at other than a primary key: their values are kept."""
    return {(c.ref_table, c.ref_column) for t in TABLES for c in t.foreign_keys if c.ref_column}


def build_demo(path: str | Path, *, scale: float = 1.0, seed: int = 0, progress: bool = True) -> BuildStats:
    """Write the demo database to `path` (replaced if it exists); the same seed and scale give the same content."""
    path = Path(path)
    started = time.perf_counter()
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA page_size = 8192")
    keep = _referenced_columns()
    referenced: dict[tuple[str, str], list] = {}
    row_counts: dict[str, int] = {}
    total = 0
    conn.execute("BEGIN")
    for table in tqdm(TABLES, desc="demo tables", unit="table", disable=not progress, leave=False):
        n = _row_count(table, scale, row_counts)
        conn.execute(render_create_table(table, TABLES_BY_NAME))
        columns = [_column_values(table, c, n, seed, row_counts, referenced) for c in table.columns]
        for spec, values in zip(table.columns, columns, strict=True):
            if (table.name, spec.name) in keep:
                referenced[(table.name, spec.name)] = [x for x in values if x is not None]
        placeholders = ", ".join("?" * len(columns))
        conn.executemany(f'INSERT INTO "{table.name}" VALUES ({placeholders})', zip(*columns, strict=True))
        row_counts[table.name] = n
        total += n
    for table in TABLES:
        for column in table.foreign_keys:
            if table.fact or table.row_count(scale) > 5000:
                conn.execute(
                    f'CREATE INDEX "ix_{table.name}_{column.name}" ON "{table.name}" ("{column.name}")'
                )
    conn.execute(f"PRAGMA user_version = {GENERATOR_VERSION}")
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    stats = BuildStats(path=path, tables=len(TABLES), rows=total, seconds=time.perf_counter() - started)
    # Not the path: the cache builds into a temporary name, which only its caller's log line should show.
    log.info("built the demo database: %d tables, %d rows in %.1f s", stats.tables, stats.rows, stats.seconds)
    return stats

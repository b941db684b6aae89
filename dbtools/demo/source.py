"""The demo SQLite file that the loaders copy into other engines, checked against this generator's version."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from dbtools.demo.build import GENERATOR_VERSION
from dbtools.demo.spec import TableSpec

_SIZED_TYPE = re.compile(r"(VARCHAR|CHAR|NUMERIC)\((\d+(?:,\d+)?)\)")


def open_demo_source(source: Path) -> sqlite3.Connection:
    """A read-only connection to a demo database built by this generator version; a clear error otherwise."""
    if not source.exists():
        raise FileNotFoundError(
            f"demo database {source} not found: build it with `python -m dbtools.demo build`"
        )
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != GENERATOR_VERSION:
        conn.close()
        raise ValueError(
            f"{source} was built by demo generator version {version}, this is version "
            f"{GENERATOR_VERSION}: rebuild it with `python -m dbtools.demo build --out {source}`"
        )
    return conn


def demo_rows(conn: sqlite3.Connection, table: TableSpec) -> Iterator[tuple]:
    """The table's rows in the order they were generated."""
    return conn.execute(f'SELECT * FROM "{table.name}" ORDER BY rowid')


def sized_type(sql_type: str) -> tuple[str, str] | None:
    """("VARCHAR", "12") for VARCHAR(12), CHAR(n) and NUMERIC(p,s); None for a type without a size."""
    match = _SIZED_TYPE.fullmatch(sql_type.upper())
    return (match.group(1), match.group(2)) if match else None

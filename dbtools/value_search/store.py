"""The value index's store: each text column's most frequent distinct values, read from the user's database
into a side SQLite file (FTS5 trigram) in the cache directory, and re-read for tables that changed."""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from dbtools.cache import cache_dir
from dbtools.engines import ColumnInfo, Database, TableInfo
from dbtools.errors import DatabaseToolError

log = logging.getLogger(__name__)

INDEX_FORMAT = 1  # bump when the store's layout changes: older files are rebuilt
# How each dialect writes a value as text and counts its characters, where it differs from CAST(x AS TEXT) and
# length() (MySQL has no TEXT cast, and its length() counts bytes).
_TEXT_TYPE = {"mysql": "CHAR"}
_CHARACTERS = {"mysql": "char_length"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS indexed_tables (table_name TEXT PRIMARY KEY, fingerprint TEXT, indexed_at REAL);
CREATE TABLE IF NOT EXISTS indexed_columns (
    col_id INTEGER PRIMARY KEY, table_name TEXT NOT NULL, column_name TEXT NOT NULL,
    distinct_values INTEGER NOT NULL, complete INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS indexed_columns_table ON indexed_columns (table_name);
CREATE TABLE IF NOT EXISTS vals (
    id INTEGER PRIMARY KEY, col_id INTEGER NOT NULL, value TEXT NOT NULL, folded TEXT NOT NULL,
    row_count INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS vals_folded ON vals (folded);
CREATE INDEX IF NOT EXISTS vals_col ON vals (col_id);
CREATE VIRTUAL TABLE IF NOT EXISTS vals_fts USING fts5(
    value, content='vals', content_rowid='id', tokenize='trigram');
"""

# CREATE VIEW, with what MySQL writes between the two words (ALGORITHM=..., DEFINER=..., SQL SECURITY ...).
_CREATE_VIEW = re.compile(
    r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:ALGORITHM\s*=\s*\w+|DEFINER\s*=\s*\S+|SQL\s+SECURITY\s+\w+)\s+)*"
    r"(?:MATERIALIZED\s+)?VIEW\b",
    re.IGNORECASE,
)


@dataclass
class RefreshReport:
    """What a refresh did: tables (re-)indexed, tables dropped from the index, and how long it took."""

    indexed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def is_text_type(column_type: str) -> bool:
    """True for the declared types that hold text on SQLite (type affinity rules), PostgreSQL, MySQL (whose ENUM
    and SET hold text too) and DuckDB."""
    upper = column_type.upper()
    if upper == "":
        return True  # SQLite columns without a type hold whatever was stored, often text
    if upper.startswith(("ENUM(", "SET(")):
        return True
    return any(word in upper for word in ("CHAR", "TEXT", "CLOB", "STRING", "CITEXT")) or upper == "NAME"


def fold(text: str) -> str:
    """The case-insensitive form values are compared in."""
    return text.casefold()


def as_text(db: Database, expression: str) -> str:
    """`expression` cast to text in the database's dialect."""
    return f"CAST({expression} AS {_TEXT_TYPE.get(db.dialect, 'TEXT')})"


def default_index_path(db: Database) -> Path:
    """Where the index of `db` lives: one file per database and rule set under the cache directory."""
    digest = hashlib.sha256(db.cache_key.encode()).hexdigest()[:24]
    return cache_dir() / "value-index" / f"{db.dialect}-{digest}.sqlite"


class ValueStore:
    """The side file holding one database's indexed values; only read from the database, never written to it.

    `max_values_per_column` bounds how many distinct values (the most frequent) are kept per column, and values
    longer than `max_value_chars` are left out. The caller serialises refresh() calls.
    """

    def __init__(
        self,
        db: Database,
        path: Path,
        *,
        max_values_per_column: int,
        max_value_chars: int,
        max_age_s: float,
        build_timeout_s: float,
        workers: int,
        progress: bool,
    ) -> None:
        self.db = db
        self.path = path
        self.max_values_per_column = max_values_per_column
        self.max_value_chars = max_value_chars
        self.max_age_s = max_age_s
        self.build_timeout_s = build_timeout_s
        self.workers = max(1, workers)
        self.progress = progress
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    def connect(self) -> sqlite3.Connection:
        """A new connection to the store; close it when done."""
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _open(self) -> None:
        with closing(self.connect()) as conn:
            conn.executescript(_SCHEMA)
            stored = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if stored.get("format") not in (None, str(INDEX_FORMAT)):
                log.info("value index %s has an older format; rebuilding it", self.path)
                conn.executescript(
                    "DROP TABLE vals_fts; DROP TABLE vals; DROP TABLE indexed_columns; "
                    "DROP TABLE indexed_tables; DELETE FROM meta;" + _SCHEMA
                )
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('format', ?), ('database', ?)",
                (str(INDEX_FORMAT), self.db.display_name),
            )

    def _meta(self, conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def is_stale(self) -> bool:
        """Whether the store was never checked against the database, or last more than `max_age_s` ago."""
        with closing(self.connect()) as conn:
            checked_at = self._meta(conn, "checked_at")
        return checked_at is None or time.time() - float(checked_at) > self.max_age_s

    def refresh(self, catalog: list[TableInfo]) -> RefreshReport:
        """Re-index every table of `catalog` whose fingerprint or columns changed, add new tables, drop vanished
        ones."""
        started = time.perf_counter()
        report = RefreshReport()
        tables = [t for t in catalog if not _is_view(t)]
        with closing(self.connect()) as conn:
            stored = dict(conn.execute("SELECT table_name, fingerprint FROM indexed_tables").fetchall())
        current = {t.name: _table_marker(self.db, t) for t in tables}
        changed = [t for t in tables if stored.get(t.name) != current[t.name]]
        report.removed = sorted(set(stored) - set(current))
        report.unchanged = len(tables) - len(changed)
        with closing(self.connect()) as conn:
            for name in report.removed:
                self._replace_table(conn, name, None, [])
            if changed:
                self._index_tables(conn, changed, current)
            if len(changed) > len(tables) // 4:
                # After a (re)build, merging the full-text index into one segment speeds up lookups.
                conn.execute("INSERT INTO vals_fts (vals_fts) VALUES ('optimize')")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('checked_at', ?)", (repr(time.time()),))
        report.indexed = [t.name for t in changed]
        report.seconds = time.perf_counter() - started
        if changed or report.removed:
            log.info(
                "value index: %d tables indexed, %d removed, %d unchanged in %.1f s",
                len(changed),
                len(report.removed),
                report.unchanged,
                report.seconds,
            )
        return report

    def _index_tables(
        self, conn: sqlite3.Connection, tables: list[TableInfo], markers: dict[str, str]
    ) -> None:
        with (
            ThreadPoolExecutor(self.workers) as pool,
            tqdm(
                total=len(tables), desc="value index", unit="table", disable=not self.progress, leave=False
            ) as bar,
        ):
            # Reads run in parallel on the database; each table's rows land in the store in one transaction.
            for table, columns in zip(tables, pool.map(self._read_table, tables), strict=True):
                self._replace_table(conn, table.name, markers[table.name], columns)
                bar.update()

    def _read_table(self, table: TableInfo) -> list[tuple[ColumnInfo, list[tuple[str, int]], bool]]:
        out = []
        for column in table.columns:
            if not is_text_type(column.type):
                continue
            try:
                values = self._distinct_values(table, column)
            except DatabaseToolError as error:
                # One unreadable column (a timeout, undecodable bytes) must not cost the whole index.
                log.warning("value index: skipped %s.%s: %s", table.name, column.name, error)
                continue
            complete = len(values) <= self.max_values_per_column
            out.append((column, values[: self.max_values_per_column], complete))
        return out

    def _distinct_values(self, table: TableInfo, column: ColumnInfo) -> list[tuple[str, int]]:
        """The column's most frequent distinct text values with their row counts (one more than the bound)."""
        name = self.db.quote(column.name)
        text = as_text(self.db, name)
        length = _CHARACTERS.get(self.db.dialect, "length")
        p = self.db.placeholder
        # SQLite columns take any type of value: index only the values stored as text.
        only_text = f" AND typeof({name}) = 'text'" if self.db.dialect == "sqlite" else ""
        sql = (
            f"SELECT {text}, COUNT(*) FROM {self.db.quote(table.name)} "
            f"WHERE {name} IS NOT NULL{only_text} AND {length}({text}) BETWEEN 1 AND {p} "
            f"GROUP BY {text} ORDER BY COUNT(*) DESC, {text} LIMIT {p}"
        )
        params = (self.max_value_chars, self.max_values_per_column + 1)
        return [(v, n) for v, n in self.db.stream(sql, params, timeout_s=self.build_timeout_s)]

    def _replace_table(
        self,
        conn: sqlite3.Connection,
        table_name: str,
        marker: str | None,
        columns: Iterable[tuple[ColumnInfo, list[tuple[str, int]], bool]],
    ) -> None:
        """Swap one table's entries in a single transaction (marker None drops the table)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            old = [
                r[0]
                for r in conn.execute(
                    "SELECT col_id FROM indexed_columns WHERE table_name = ?", (table_name,)
                )
            ]
            if old:
                marks = ",".join("?" * len(old))
                conn.execute(
                    "INSERT INTO vals_fts (vals_fts, rowid, value) "
                    f"SELECT 'delete', id, value FROM vals WHERE col_id IN ({marks})",
                    old,
                )
                conn.execute(f"DELETE FROM vals WHERE col_id IN ({marks})", old)
                conn.execute(f"DELETE FROM indexed_columns WHERE col_id IN ({marks})", old)
            conn.execute("DELETE FROM indexed_tables WHERE table_name = ?", (table_name,))
            if marker is not None:
                for column, values, complete in columns:
                    col_id = conn.execute(
                        "INSERT INTO indexed_columns (table_name, column_name, distinct_values, complete) "
                        "VALUES (?, ?, ?, ?)",
                        (table_name, column.name, len(values), int(complete)),
                    ).lastrowid
                    first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM vals").fetchone()[0]
                    conn.executemany(
                        "INSERT INTO vals (col_id, value, folded, row_count) VALUES (?, ?, ?, ?)",
                        ((col_id, v, fold(v), n) for v, n in values),
                    )
                    conn.execute(
                        "INSERT INTO vals_fts (rowid, value) SELECT id, value FROM vals WHERE id >= ?",
                        (first,),
                    )
                conn.execute("INSERT INTO indexed_tables VALUES (?, ?, ?)", (table_name, marker, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _is_view(table: TableInfo) -> bool:
    return _CREATE_VIEW.match(table.create_sql) is not None


def _table_marker(db: Database, table: TableInfo) -> str:
    """The table's fingerprint plus its text columns, so a schema change also triggers re-indexing."""
    columns = ",".join(f"{c.name}:{c.type}" for c in table.columns if is_text_type(c.type))
    return f"{db.fingerprint(table.name)}|{columns}"

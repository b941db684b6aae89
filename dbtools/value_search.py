"""Value search: which columns of which tables hold a literal (exact, case-insensitive, partial, fuzzy).

The distinct text values of every text column are indexed once into a side SQLite file (FTS5 trigram) in the
user cache directory; the user database is only read. Tables whose fingerprint changed are re-indexed.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from dbtools.cache import cache_dir
from dbtools.engines.base import ColumnInfo, Database, ForeignKey, TableInfo, closest_hint
from dbtools.errors import DatabaseToolError, UnknownObjectError

log = logging.getLogger(__name__)

INDEX_FORMAT = 1  # bump when the store's layout changes: older files are rebuilt
# How each dialect writes a value as text and counts its characters, where it differs from CAST(x AS TEXT) and
# length() (MySQL has no TEXT cast, and its length() counts bytes).
_TEXT_TYPE = {"mysql": "CHAR"}
_CHARACTERS = {"mysql": "char_length"}
CASE_INSENSITIVE_SCORE = 0.95
MAX_LINKS = 8  # foreign keys listed per match
KEY_LOOKUP_MAX_ROWS = 10_000  # row keys are looked up live only in tables this small

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


@dataclass
class ValueMatch:
    """A column holding values that match the searched text; `values` are the best matches, best first."""

    table: str
    column: str
    match_type: str  # exact | case_insensitive | partial | fuzzy (the best one in this column)
    score: float  # 1.0 exact ... lower for weaker matches; results are sorted by it
    values: list[str]
    matching_values: int  # distinct matching values found in the index
    matching_rows: int  # rows holding one of those values
    complete: bool  # False when the column has more distinct values than were indexed, or a cap was hit
    # Foreign keys from this column and into this table, "customers.country_code -> countries.iso_code":
    # how the value reaches other tables.
    foreign_keys: list[str] = field(default_factory=list)
    # For an exact match naming one row of a small table that others reference: that row's referenced key
    # values, e.g. {"id": 1, "iso_code": "DE"} for "Germany", the literals the referencing columns hold.
    row_keys: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


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


def _trigrams(text: str) -> list[str]:
    return sorted({text[i : i + 3] for i in range(len(text) - 2)})


def _fts_phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def default_index_path(db: Database) -> Path:
    """Where the index of `db` lives: one file per database identity under the cache directory."""
    identity = f"{db.dialect}:{getattr(db, 'path', None) or db.display_name}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:24]
    return cache_dir() / "value-index" / f"{db.dialect}-{digest}.sqlite"


class ValueIndex:
    """The value index of one database: build or refresh it, then `search()` it.

    `max_values_per_column` bounds how many distinct values (the most frequent) are kept per column, and
    values longer than `max_value_chars` are left out (free text is not what values are looked up by).
    The index is checked against the database's fingerprints on first use and then at most every
    `max_age_s` seconds; `refresh()` checks at once. Safe to share between threads.
    """

    def __init__(
        self,
        db: Database,
        *,
        index_path: str | Path | None = None,
        max_values_per_column: int = 20_000,
        max_value_chars: int = 200,
        max_age_s: float = 300.0,
        build_timeout_s: float = 600.0,
        workers: int = 4,
        progress: bool = True,
    ) -> None:
        self.db = db
        self.path = Path(index_path) if index_path else default_index_path(db)
        self.max_values_per_column = max_values_per_column
        self.max_value_chars = max_value_chars
        self.max_age_s = max_age_s
        self.build_timeout_s = build_timeout_s
        self.workers = max(1, workers)
        self.progress = progress
        self._refresh_lock = threading.RLock()
        self._catalog: dict[str, TableInfo] | None = None  # the schema as of the last refresh, by lower name
        self._incoming: dict[
            str, list[tuple[str, ForeignKey]]
        ] = {}  # (child table, key) by lower parent name
        self._small_tables: dict[str, bool] = {}  # tables without a row estimate, by whether they are small
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open_store()

    # --- the store ---------------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _open_store(self) -> None:
        with closing(self._connect()) as conn:
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

    # --- building and refreshing -------------------------------------------------------------------------
    def refresh(self) -> RefreshReport:
        """Re-index every table whose fingerprint or columns changed, add new tables, drop vanished ones."""
        with self._refresh_lock:
            started = time.perf_counter()
            report = RefreshReport()
            catalog = self.db.tables()
            self._remember_catalog(catalog)
            tables = [t for t in catalog if not _is_view(t)]
            with closing(self._connect()) as conn:
                stored = dict(conn.execute("SELECT table_name, fingerprint FROM indexed_tables").fetchall())
            current = {t.name: _table_marker(self.db, t) for t in tables}
            changed = [t for t in tables if stored.get(t.name) != current[t.name]]
            report.removed = sorted(set(stored) - set(current))
            report.unchanged = len(tables) - len(changed)
            with closing(self._connect()) as conn:
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

    def ensure_fresh(self) -> None:
        """Refresh when the index was never built or was last checked more than `max_age_s` ago."""
        if self._is_stale():
            with self._refresh_lock:
                # Callers that waited here while another thread refreshed find the index fresh now.
                if self._is_stale():
                    self.refresh()

    def _is_stale(self) -> bool:
        with closing(self._connect()) as conn:
            checked_at = self._meta(conn, "checked_at")
        return checked_at is None or time.time() - float(checked_at) > self.max_age_s

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
        text = _as_text(self.db, name)
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

    # --- searching ---------------------------------------------------------------------------------------
    def search(
        self,
        text: str,
        *,
        table: str | None = None,
        column: str | None = None,
        limit: int = 10,
        fuzzy: bool = True,
        samples: int = 5,
        candidate_limit: int = 500,
        fuzzy_cutoff: float = 0.75,
    ) -> list[ValueMatch]:
        """Columns holding `text`: exact, case-insensitive and substring matches (prefix matches for text
        under three characters); when none exist and `fuzzy` is set, values within a typo or two.

        `table` and `column` narrow the search (case-insensitive names; unknown ones raise UnknownObjectError
        naming the closest). Up to `limit` columns, best first, each with up to `samples` matching values.
        """
        text = text.strip()
        if not text:
            raise ValueError("give a non-empty value to search for")
        table, column = self._known_scope(table, column)
        self.ensure_fresh()
        folded = fold(text)
        found: dict[int, dict[str, tuple[str, float, int]]] = {}  # col_id -> value -> (type, score, rows)

        def add(rows: Iterable[tuple[int, str, int]], kind_of) -> None:
            for col_id, value, row_count in rows:
                kind, score = kind_of(value)
                if kind is None:
                    continue
                seen = found.setdefault(col_id, {})
                if value not in seen or seen[value][1] < score:
                    seen[value] = (kind, score, row_count)

        with closing(self._connect()) as conn:
            scope, scope_params = _scope_filter(table, column)
            add(
                conn.execute(
                    f"SELECT v.col_id, v.value, v.row_count FROM vals v JOIN indexed_columns c USING (col_id) "
                    f"WHERE v.folded = ?{scope} LIMIT ?",
                    (folded, *scope_params, candidate_limit),
                ),
                lambda v: ("exact", 1.0) if v == text else ("case_insensitive", CASE_INSENSITIVE_SCORE),
            )
            partial_rows = self._partial_candidates(conn, folded, scope, scope_params, candidate_limit)
            capped = len(partial_rows) >= candidate_limit
            add(partial_rows, lambda v: ("partial", 0.5 + 0.4 * len(folded) / max(len(v), 1)))
            if fuzzy and not found and len(folded) >= 3:
                # Typo tolerance is for text that matched nothing as written.
                candidates = _closest_candidates(
                    folded, self._fuzzy_candidates(conn, folded, scope, scope_params)
                )
                add(candidates, lambda v: _fuzzy_score(folded, fold(v), fuzzy_cutoff))
            columns = {
                r[0]: r[1:]
                for r in conn.execute(
                    f"SELECT col_id, table_name, column_name, complete FROM indexed_columns "
                    f"WHERE col_id IN ({','.join('?' * len(found))})",
                    list(found),
                )
            }
        matches = []
        for col_id, values in found.items():
            table_name, column_name, complete = columns[col_id]
            ranked = sorted(values.items(), key=lambda kv: (-kv[1][1], -kv[1][2], kv[0]))
            best_kind, best_score, _ = ranked[0][1]
            matches.append(
                ValueMatch(
                    table=table_name,
                    column=column_name,
                    match_type=best_kind,
                    score=round(best_score, 4),
                    values=[v for v, _ in ranked[:samples]],
                    matching_values=len(values),
                    matching_rows=sum(r for _, _, r in values.values()),
                    complete=bool(complete) and not capped,
                )
            )
        matches.sort(key=lambda m: (-m.score, -m.matching_rows, m.table, m.column))
        matches = matches[:limit]
        self._add_links(matches)
        return matches

    def _known_scope(self, table: str | None, column: str | None) -> tuple[str | None, str | None]:
        """The table and column as the catalog spells them: a misspelled name must not read as "no match"."""
        if table is not None:
            info = self.db.table(table)
            if column is None:
                return info.name, None
            found = info.column(column)
            if not is_text_type(found.type):
                raise ValueError(
                    f"{info.name}.{found.name} holds {found.type} values and only text columns are searched: "
                    f"compare it in run_query instead, e.g. WHERE {self.db.quote(found.name)} = ..."
                )
            return info.name, found.name
        if column is not None:
            names = list(dict.fromkeys(c.name for t in self.db.tables() for c in t.columns))
            if column.lower() not in {n.lower() for n in names}:
                raise UnknownObjectError(
                    f'no column "{column}" in any table' + closest_hint(column, names, "columns")
                )
        return None, column

    def _remember_catalog(self, catalog: list[TableInfo]) -> None:
        """Keep the schema, and the foreign keys pointing into each table, for the links of later lookups."""
        self._catalog = {t.name.lower(): t for t in catalog}
        self._incoming = {}
        for child in catalog:
            for fk in child.foreign_keys:
                self._incoming.setdefault(fk.ref_table.lower(), []).append((child.name, fk))
        self._small_tables.clear()

    def _add_links(self, matches: list[ValueMatch]) -> None:
        """Fill in the foreign keys around each match and, for small referenced tables, the row's keys."""
        # The schema as the index saw it: re-reading the catalog per lookup costs more than the lookup.
        if self._catalog is None:
            self._remember_catalog(self.db.tables())
        tables, incoming = self._catalog, self._incoming
        for match in matches:
            info = tables.get(match.table.lower())
            if info is None:
                continue  # dropped since the index was built
            outgoing = [(info.name, fk) for fk in info.foreign_keys if match.column in fk.columns]
            into = incoming.get(info.name.lower(), [])
            links = [_foreign_key_text(name, fk) for name, fk in outgoing + into]
            match.foreign_keys = links[:MAX_LINKS] + (
                [f"... and {len(links) - MAX_LINKS} more"] if len(links) > MAX_LINKS else []
            )
            # Only a value naming a single row (a lookup table's entry) has keys worth showing.
            if (
                into
                and match.match_type in ("exact", "case_insensitive")
                and match.matching_rows == 1
                and self._is_small(info)
            ):
                key_columns = list(
                    dict.fromkeys(c for _, fk in into for c in fk.ref_columns if c != match.column)
                )
                if key_columns:
                    match.row_keys = self._row_keys(info, match.column, match.values[0], key_columns)

    def _is_small(self, info: TableInfo) -> bool:
        """Whether a table is small enough to look row keys up live: the catalog's estimate where the engine
        keeps one, else a count that stops past the limit (remembered, like the rest of the catalog)."""
        if info.row_estimate is not None:
            return info.row_estimate <= KEY_LOOKUP_MAX_ROWS
        if info.name not in self._small_tables:
            sql = (
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {self.db.quote(info.name)} "
                f"LIMIT {KEY_LOOKUP_MAX_ROWS + 1}) AS bounded"
            )
            try:
                [(count,)] = list(self.db.stream(sql))
            except DatabaseToolError:
                count = KEY_LOOKUP_MAX_ROWS + 1
            self._small_tables[info.name] = count <= KEY_LOOKUP_MAX_ROWS
        return self._small_tables[info.name]

    def _row_keys(
        self, info: TableInfo, column: str, value: str, key_columns: list[str]
    ) -> dict[str, object]:
        q = self.db.quote
        sql = (
            f"SELECT {', '.join(q(c) for c in key_columns)} FROM {q(info.name)} "
            f"WHERE {_as_text(self.db, q(column))} = {self.db.placeholder} LIMIT 1"
        )
        rows = list(self.db.stream(sql, (value,)))
        if not rows:
            return {}
        return {
            c: v if v is None or isinstance(v, (int, float, str)) else str(v)
            for c, v in zip(key_columns, rows[0], strict=True)
        }

    def _partial_candidates(
        self, conn: sqlite3.Connection, folded: str, scope: str, scope_params: tuple, limit: int
    ) -> list[tuple[int, str, int]]:
        if len(folded) >= 3:
            # A trigram phrase query finds every value containing the text, case-insensitively.
            sql = (
                "SELECT v.col_id, v.value, v.row_count FROM vals_fts f JOIN vals v ON v.id = f.rowid "
                f"JOIN indexed_columns c ON c.col_id = v.col_id WHERE vals_fts MATCH ?{scope} LIMIT ?"
            )
            params = (_fts_phrase(folded), *scope_params, limit)
        else:
            # Too short for a trigram: prefix matches through the folded-value index instead of a scan.
            sql = (
                "SELECT v.col_id, v.value, v.row_count FROM vals v JOIN indexed_columns c USING (col_id) "
                f"WHERE v.folded >= ? AND v.folded < ?{scope} LIMIT ?"
            )
            params = (folded, folded + "\U0010ffff", *scope_params, limit)
        return [r for r in conn.execute(sql, params) if fold(r[1]) != folded]

    def _fuzzy_candidates(
        self,
        conn: sqlite3.Connection,
        folded: str,
        scope: str,
        scope_params: tuple,
        limit: int = 300,
        scan_limit: int = 3000,
    ) -> list[tuple[int, str, int]]:
        # Pigeonhole: a value within k edits of the text contains one of k + 1 disjoint pieces of it unchanged,
        # so matching any piece as a substring (no ranking) finds the candidates; difflib reranks them. Each
        # piece reads at most `scan_limit` index entries, which bounds the time a common piece can take.
        pieces = _pieces(folded)
        slack = max(2, len(folded) // 4)
        per_piece = " UNION ".join(
            "SELECT rowid FROM (SELECT rowid FROM vals_fts WHERE vals_fts MATCH ? LIMIT ?)" for _ in pieces
        )
        sql = (
            "SELECT v.col_id, v.value, v.row_count FROM vals v JOIN indexed_columns c ON c.col_id = v.col_id "
            f"WHERE v.id IN ({per_piece}){scope} AND length(v.folded) BETWEEN ? AND ? LIMIT ?"
        )
        piece_params = [x for p in pieces for x in (_fts_phrase(p), scan_limit)]
        params = (*piece_params, *scope_params, len(folded) - slack, len(folded) + slack, limit)
        return conn.execute(sql, params).fetchall()


def _pieces(folded: str) -> list[str]:
    """Disjoint pieces of the text, at least 3 characters each: one per tolerated edit plus one."""
    if len(folded) < 6:
        return _trigrams(folded)
    count = 2 if len(folded) < 12 else 3
    size = len(folded) // count
    return [folded[i * size : (i + 1) * size if i < count - 1 else len(folded)] for i in range(count)]


def _padded_trigrams(text: str) -> set[str]:
    padded = f"  {text} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


def _closest_candidates(
    folded: str, rows: list[tuple[int, str, int]], keep: int = 40
) -> list[tuple[int, str, int]]:
    """The candidates sharing the most trigrams with the text (Dice coefficient): cheap to compute for
    hundreds of values, so only these few get difflib's slower character-level comparison."""
    grams = _padded_trigrams(folded)

    def dice(row: tuple[int, str, int]) -> float:
        other = _padded_trigrams(fold(row[1]))
        return 2 * len(grams & other) / (len(grams) + len(other))

    return sorted(rows, key=dice, reverse=True)[:keep]


def _fuzzy_score(folded: str, candidate: str, cutoff: float) -> tuple[str | None, float]:
    """Typo tolerance: difflib's similarity of the folded text and value, scaled below partial matches."""
    if folded in candidate:
        return None, 0.0  # a partial (or exact) match, scored as such
    matcher = difflib.SequenceMatcher(None, folded, candidate)
    if matcher.real_quick_ratio() < cutoff or matcher.quick_ratio() < cutoff:
        return None, 0.0
    ratio = matcher.ratio()
    if ratio < cutoff:
        return None, 0.0
    return "fuzzy", 0.8 * ratio


def _foreign_key_text(table: str, fk: ForeignKey) -> str:
    def side(name: str, columns: tuple[str, ...]) -> str:
        return f"{name}.{columns[0]}" if len(columns) == 1 else f"{name}({', '.join(columns)})"

    return f"{side(table, fk.columns)} -> {side(fk.ref_table, fk.ref_columns)}"


def _scope_filter(table: str | None, column: str | None) -> tuple[str, tuple]:
    clauses, params = [], []
    if table is not None:
        clauses.append(" AND c.table_name = ?")
        params.append(table)
    if column is not None:
        clauses.append(" AND lower(c.column_name) = lower(?)")
        params.append(column)
    return "".join(clauses), tuple(params)


def _as_text(db: Database, expression: str) -> str:
    return f"CAST({expression} AS {_TEXT_TYPE.get(db.dialect, 'TEXT')})"


# CREATE VIEW, with what MySQL writes between the two words (ALGORITHM=..., DEFINER=..., SQL SECURITY ...).
_CREATE_VIEW = re.compile(
    r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:ALGORITHM\s*=\s*\w+|DEFINER\s*=\s*\S+|SQL\s+SECURITY\s+\w+)\s+)*"
    r"(?:MATERIALIZED\s+)?VIEW\b",
    re.IGNORECASE,
)


def _is_view(table: TableInfo) -> bool:
    return _CREATE_VIEW.match(table.create_sql) is not None


def _table_marker(db: Database, table: TableInfo) -> str:
    """The table's fingerprint plus its text columns, so a schema change also triggers re-indexing."""
    columns = ",".join(f"{c.name}:{c.type}" for c in table.columns if is_text_type(c.type))
    return f"{db.fingerprint(table.name)}|{columns}"

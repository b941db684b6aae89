"""Matching and ranking in the value index's store: exact, case-insensitive, partial (trigram) and fuzzy
matches of a text, scored and grouped into the columns that hold them."""

from __future__ import annotations

import difflib
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from dbtools.value_search.store import fold

CASE_INSENSITIVE_SCORE = 0.95


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


def find_matches(
    conn: sqlite3.Connection,
    text: str,
    *,
    table: str | None,
    column: str | None,
    limit: int,
    fuzzy: bool,
    samples: int,
    candidate_limit: int,
    fuzzy_cutoff: float,
) -> list[ValueMatch]:
    """Up to `limit` columns of the store holding `text`, best first, each with up to `samples` values: exact,
    case-insensitive and substring matches (prefix matches for text under three characters); when none exist
    and `fuzzy` is set, values within a typo or two. `table` and `column` are names as the store holds them."""
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

    scope, scope_params = _scope_filter(table, column)
    add(
        conn.execute(
            f"SELECT v.col_id, v.value, v.row_count FROM vals v JOIN indexed_columns c USING (col_id) "
            f"WHERE v.folded = ?{scope} LIMIT ?",
            (folded, *scope_params, candidate_limit),
        ),
        lambda v: ("exact", 1.0) if v == text else ("case_insensitive", CASE_INSENSITIVE_SCORE),
    )
    partial_rows = _partial_candidates(conn, folded, scope, scope_params, candidate_limit)
    capped = len(partial_rows) >= candidate_limit
    add(partial_rows, lambda v: ("partial", 0.5 + 0.4 * len(folded) / max(len(v), 1)))
    if fuzzy and not found and len(folded) >= 3:
        # Typo tolerance is for text that matched nothing as written.
        candidates = _closest_candidates(folded, _fuzzy_candidates(conn, folded, scope, scope_params))
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
    return matches[:limit]


def _partial_candidates(
    conn: sqlite3.Connection, folded: str, scope: str, scope_params: tuple, limit: int
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


def _trigrams(text: str) -> list[str]:
    return sorted({text[i : i + 3] for i in range(len(text) - 2)})


def _fts_phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


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


def _scope_filter(table: str | None, column: str | None) -> tuple[str, tuple]:
    clauses, params = [], []
    if table is not None:
        clauses.append(" AND c.table_name = ?")
        params.append(table)
    if column is not None:
        clauses.append(" AND lower(c.column_name) = lower(?)")
        params.append(column)
    return "".join(clauses), tuple(params)

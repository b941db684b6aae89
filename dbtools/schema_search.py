"""Schema search: tables and columns ranked by how well their names and comments match some keywords.

Names are split into words (camelCase, snake_case, digits), common abbreviations are expanded (`cust_addr`
reads as "customer address") and words are reduced to a simple stem, so "customer addresses" finds it.
"""

from __future__ import annotations

import difflib
import re
import threading
import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from dbtools.engines import Database, TableInfo

ABBREVIATIONS = {
    "acct": "account",
    "addr": "address",
    "amt": "amount",
    "avg": "average",
    "bal": "balance",
    "cat": "category",
    "cd": "code",
    "cnt": "count",
    "cntry": "country",
    "co": "company",
    "cust": "customer",
    "curr": "currency",
    "desc": "description",
    "descr": "description",
    "dept": "department",
    "dob": "birth date",
    "dt": "date",
    "emp": "employee",
    "img": "image",
    "info": "information",
    "inv": "invoice",
    "je": "journal entry",
    "jl": "journal line",
    "gl": "general ledger",
    "loc": "location",
    "mgr": "manager",
    "msg": "message",
    "mvmt": "movement",
    "nm": "name",
    "no": "number",
    "num": "number",
    "ord": "order",
    "org": "organization",
    "pct": "percent",
    "pmt": "payment",
    "po": "purchase order",
    "prod": "product",
    "qty": "quantity",
    "ref": "reference",
    "rpt": "report",
    "seq": "sequence",
    "supp": "supplier",
    "tel": "telephone",
    "ts": "timestamp",
    "ttl": "title",
    "txn": "transaction",
    "uom": "unit of measure",
    "usr": "user",
    "wh": "warehouse",
    "yr": "year",
}
FIELD_WEIGHTS = {"name": 1.0, "comment": 0.5, "table": 0.4}  # a column's table name counts as context
EXACT, PREFIX, CLOSE = 1.0, 0.7, 0.6
COVERAGE_BONUS = 0.2

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@dataclass
class SchemaMatch:
    """A table (column None) or a column, with the keywords it matched."""

    table: str
    column: str | None
    score: float
    matched: list[str]
    type: str | None = None
    comment: str | None = None

    @property
    def kind(self) -> str:
        return "table" if self.column is None else "column"

    def to_dict(self) -> dict:
        return {**asdict(self), "kind": self.kind}


def split_words(text: str) -> list[str]:
    """`customerAddressID`, `cust_addr`, `HTTPStatus2` -> lower-case words."""
    return [w.lower() for w in _WORD.findall(text)]


def stem(word: str) -> str:
    """A light English stemmer: plurals and -ing/-ed endings, enough to equate `orders` and `ordered`."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "uses")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            base = word[: -len(suffix)]
            return base[:-1] if len(base) > 2 and base[-1] == base[-2] and base[-1] not in "ls" else base
    return word


def terms(text: str | None) -> list[str]:
    """The searchable terms of a name or comment: its words, stemmed, plus the expansions of abbreviations."""
    out: list[str] = []
    for word in split_words(text or ""):
        out.append(stem(word))
        out += [stem(w) for w in ABBREVIATIONS.get(word, "").split()]
    return list(dict.fromkeys(out))


class SchemaIndex:
    """Inverted index of a database's table and column names and comments; rebuilt when the schema changes."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._tables: list[TableInfo] | None = None
        self._entries: list[SchemaMatch] = []
        self._postings: dict[str, list[tuple[int, str]]] = {}
        self._name_sizes: list[int] = []

    def _build(self, tables: list[TableInfo]) -> None:
        entries: list[SchemaMatch] = []
        postings: dict[str, list[tuple[int, str]]] = defaultdict(list)
        name_sizes: list[int] = []

        def post(index: int, text: str | None, field: str) -> None:
            found = terms(text)
            for term in found:
                postings[term].append((index, field))
            if field == "name":
                name_sizes.append(len(found))

        for table in tables:
            entries.append(SchemaMatch(table.name, None, 0.0, [], comment=table.comment))
            post(len(entries) - 1, table.name, "name")
            post(len(entries) - 1, table.comment, "comment")
            for column in table.columns:
                entries.append(SchemaMatch(table.name, column.name, 0.0, [], column.type, column.comment))
                post(len(entries) - 1, column.name, "name")
                post(len(entries) - 1, column.comment, "comment")
                post(len(entries) - 1, table.name, "table")
        self._entries, self._postings, self._name_sizes = entries, dict(postings), name_sizes
        self._tables = tables

    def search(self, keywords: str | Sequence[str], limit: int = 20) -> list[SchemaMatch]:
        """Tables and columns matching the keywords, best first: every keyword counts, names above comments."""
        text = keywords if isinstance(keywords, str) else " ".join(keywords)
        query = terms(text)
        if not query:
            raise ValueError("give at least one keyword (letters or digits) to search the schema for")
        with self._lock:
            tables = self.db.tables()
            if tables != self._tables:
                self._build(tables)
            entries, postings, name_sizes = self._entries, self._postings, self._name_sizes
        best: dict[int, dict[str, float]] = defaultdict(dict)  # entry -> query term -> best contribution
        name_hits: dict[int, set[str]] = defaultdict(set)  # entry -> its name terms the query hit
        for term in query:
            for vocab_term, closeness in self._close_terms(term, postings):
                for index, field in postings[vocab_term]:
                    if field == "name":
                        name_hits[index].add(vocab_term)
                    contribution = closeness * FIELD_WEIGHTS[field]
                    if contribution > best[index].get(term, 0.0):
                        best[index][term] = contribution
        results = []
        for index, per_term in best.items():
            entry = entries[index]
            own = {t for t, c in per_term.items() if c > FIELD_WEIGHTS["table"] * EXACT}
            if not own:
                continue  # a column matched only through its table's name: the table itself is the hit
            # Every keyword matched counts most; a name the keywords cover entirely breaks ties.
            coverage = len(name_hits[index]) / max(name_sizes[index], 1)
            score = sum(per_term.values()) / len(query) + COVERAGE_BONUS * coverage
            results.append(
                SchemaMatch(
                    entry.table, entry.column, round(score, 4), sorted(per_term), entry.type, entry.comment
                )
            )
        results.sort(key=lambda m: (-m.score, m.column is not None, m.table, m.column or ""))
        return results[:limit]

    @staticmethod
    def _close_terms(term: str, postings: dict[str, list]) -> list[tuple[str, float]]:
        found = {term: EXACT} if term in postings else {}
        if len(term) >= 3:
            for candidate in postings:
                if (
                    candidate != term
                    and len(candidate) >= 3
                    and (candidate.startswith(term) or term.startswith(candidate))
                ):
                    found.setdefault(candidate, PREFIX)
            for candidate in difflib.get_close_matches(term, list(postings), n=5, cutoff=0.8):
                found.setdefault(candidate, CLOSE)
        return list(found.items())


_indexes: weakref.WeakKeyDictionary[Database, SchemaIndex] = weakref.WeakKeyDictionary()
_indexes_lock = threading.Lock()


def search_schema(db: Database, keywords: str | Sequence[str], limit: int = 20) -> list[SchemaMatch]:
    """Tables and columns of `db` matching `keywords` (one string or a list), best first."""
    with _indexes_lock:
        index = _indexes.get(db)
        if index is None:
            index = _indexes[db] = SchemaIndex(db)
    return index.search(keywords, limit)

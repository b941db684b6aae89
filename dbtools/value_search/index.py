"""The value index of one database: its store kept fresh, searched, and each match linked to the schema."""

from __future__ import annotations

import threading
from contextlib import closing
from pathlib import Path

from dbtools.engines import Database
from dbtools.errors import UnknownObjectError
from dbtools.name_hints import closest_hint
from dbtools.value_search.links import MatchLinks
from dbtools.value_search.ranking import ValueMatch, find_matches
from dbtools.value_search.store import RefreshReport, ValueStore, default_index_path, is_text_type


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
        self.store = ValueStore(
            db,
            Path(index_path) if index_path else default_index_path(db),
            max_values_per_column=max_values_per_column,
            max_value_chars=max_value_chars,
            max_age_s=max_age_s,
            build_timeout_s=build_timeout_s,
            workers=workers,
            progress=progress,
        )
        self._links = MatchLinks(db)
        self._refresh_lock = threading.RLock()

    @property
    def path(self) -> Path:
        """The side SQLite file the index lives in."""
        return self.store.path

    def refresh(self) -> RefreshReport:
        """Re-index every table whose fingerprint or columns changed, add new tables, drop vanished ones."""
        with self._refresh_lock:
            catalog = self.db.tables()
            self._links.remember(catalog)
            return self.store.refresh(catalog)

    def ensure_fresh(self) -> None:
        """Refresh when the index was never built or was last checked more than `max_age_s` ago."""
        if self.store.is_stale():
            with self._refresh_lock:
                # Callers that waited here while another thread refreshed find the index fresh now.
                if self.store.is_stale():
                    self.refresh()

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
        with closing(self.store.connect()) as conn:
            matches = find_matches(
                conn,
                text,
                table=table,
                column=column,
                limit=limit,
                fuzzy=fuzzy,
                samples=samples,
                candidate_limit=candidate_limit,
                fuzzy_cutoff=fuzzy_cutoff,
            )
        self._links.add_to(matches)
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

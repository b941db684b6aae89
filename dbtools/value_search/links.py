"""What grounds a value match in the schema: the foreign keys around its column and, for a value naming one row
of a small table that others reference, that row's key values."""

from __future__ import annotations

from dbtools.engines import Database, ForeignKey, TableInfo
from dbtools.errors import DatabaseToolError
from dbtools.value_search.ranking import ValueMatch
from dbtools.value_search.store import as_text

MAX_LINKS = 8  # foreign keys listed per match
KEY_LOOKUP_MAX_ROWS = 10_000  # row keys are looked up live only in tables this small


class MatchLinks:
    """Fills in the links of value matches from the schema as the index last saw it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._catalog: dict[str, TableInfo] | None = None  # the schema as of the last refresh, by lower name
        # (child table, key) by lower parent name
        self._incoming: dict[str, list[tuple[str, ForeignKey]]] = {}
        self._small_tables: dict[str, bool] = {}  # tables without a row estimate, by whether they are small

    def remember(self, catalog: list[TableInfo]) -> None:
        """Keep the schema, and the foreign keys pointing into each table, for the links of later lookups."""
        self._catalog = {t.name.lower(): t for t in catalog}
        self._incoming = {}
        for child in catalog:
            for fk in child.foreign_keys:
                self._incoming.setdefault(fk.ref_table.lower(), []).append((child.name, fk))
        self._small_tables.clear()

    def add_to(self, matches: list[ValueMatch]) -> None:
        """Fill in the foreign keys around each match and, for small referenced tables, the row's keys."""
        # The schema as the index saw it: re-reading the catalog per lookup costs more than the lookup.
        if self._catalog is None:
            self.remember(self.db.tables())
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
            f"WHERE {as_text(self.db, q(column))} = {self.db.placeholder} LIMIT 1"
        )
        rows = list(self.db.stream(sql, (value,)))
        if not rows:
            return {}
        return {
            c: v if v is None or isinstance(v, (int, float, str)) else str(v)
            for c, v in zip(key_columns, rows[0], strict=True)
        }


def _foreign_key_text(table: str, fk: ForeignKey) -> str:
    def side(name: str, columns: tuple[str, ...]) -> str:
        return f"{name}.{columns[0]}" if len(columns) == 1 else f"{name}({', '.join(columns)})"

    return f"{side(table, fk.columns)} -> {side(fk.ref_table, fk.ref_columns)}"

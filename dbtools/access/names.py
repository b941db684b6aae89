"""How a dialect binds the names of tables and common table expressions: PostgreSQL folds unquoted names to lower
case and keeps quoted ones as written; SQLite and DuckDB ignore case; MySQL and MariaDB ignore it for table names
only where the server folds them (lower_case_table_names), and always for CTE names. SQLite puts every CTE of a
WITH in scope in all of their bodies."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class NameRules:
    """The name comparisons of one dialect (and, for MySQL, one server)."""

    dialect: str
    case_sensitive_tables: bool = False  # MySQL/MariaDB with lower_case_table_names = 0

    def key(self, identifier: exp.Identifier) -> str:
        """The form a written name is compared in."""
        name = identifier.name
        if self.dialect == "postgres":
            return name if identifier.args.get("quoted") else name.lower()
        return self.catalog_key(name)

    def cte_key(self, identifier: exp.Identifier) -> str:
        """The form a CTE's name, or a name that may be one, is compared in: MariaDB compares CTE names without
        case even where table names keep it."""
        return identifier.name.lower() if self.dialect == "mysql" else self.key(identifier)

    @property
    def ctes_see_their_whole_with(self) -> bool:
        """Whether every CTE of a WITH is in scope in each of their bodies, itself included (SQLite), as in
        WITH RECURSIVE; elsewhere a plain WITH's CTE sees only the ones before it."""
        return self.dialect == "sqlite"

    def catalog_key(self, name: str) -> str:
        """The form a name as the catalog spells it is compared in."""
        if self.dialect == "postgres" or (self.dialect == "mysql" and self.case_sensitive_tables):
            return name
        # SQLite folds ASCII letters only.
        return name.translate(_ASCII_LOWER) if self.dialect == "sqlite" else name.lower()

"""Which relation each table reference of a query means, decided by SQL's scoping rules: a common table
expression is visible in the query of its own WITH (the later ones of that WITH included, and its own body when
RECURSIVE) and shadows any table of its name there, and nowhere else; every other name is a catalog table.

The bound query names nothing the engine could bind otherwise: each CTE gets a fresh name (its references keep
their old name as an alias), and each catalog reference is replaced by what the caller makes of it."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from dbtools.access.names import NameRules
from dbtools.errors import UnsafeQueryError

# A name no catalog table has: a CTE renamed to it cannot capture a table reference, nor a table a CTE's.
FRESH_CTE_PREFIX = "sqlscout_cte_"
# The mark of a table reference made or renamed by binding: the generated query may hold no other.
BOUND = "sqlscout_bound"


@dataclass
class TableReference:
    """One reference to a catalog table, with the name it was written with."""

    node: exp.Table

    @property
    def written(self) -> str:
        return ".".join(part.name for part in self.node.parts)


@dataclass
class BoundTables:
    """The references a query makes to catalog tables, and its CTE references already renamed."""

    tree: exp.Expression
    references: list[TableReference] = field(default_factory=list)


class TableBinder:
    """Binds the table references of queries in one dialect."""

    def __init__(self, names: NameRules) -> None:
        self.names = names

    def bind(self, tree: exp.Expression) -> BoundTables:
        """`tree` (changed in place) with every CTE renamed; its catalog table references listed, in order."""
        bound = BoundTables(tree)
        fresh = (f"{FRESH_CTE_PREFIX}{n}" for n in itertools.count(1))
        self._walk(tree, {}, bound, fresh)
        return bound

    def _walk(self, node: exp.Expression, ctes: dict[str, str], bound: BoundTables, fresh) -> None:
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
            self._reference(node, ctes, bound)
            # Everything else a table carries (joins, TABLESAMPLE and AT arguments, hints) is bound too.
            for key, value in node.args.items():
                if key not in ("this", "db", "catalog", "alias"):
                    for child in value if isinstance(value, list) else [value]:
                        if isinstance(child, exp.Expression):
                            self._walk(child, ctes, bound, fresh)
            return
        if isinstance(node, exp.Select):
            self._check_unique_sources(node)
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        if isinstance(with_, exp.With):
            ctes = self._bind_with(with_, ctes, bound, fresh)
            for key in ("search", "cycle"):
                if isinstance(with_.args.get(key), exp.Expression):
                    self._walk(with_.args[key], ctes, bound, fresh)
        for child in list(node.iter_expressions()):
            if child is not with_:
                self._walk(child, ctes, bound, fresh)

    def _check_unique_sources(self, select: exp.Select) -> None:
        """A FROM clause that names one relation twice is refused: PostgreSQL, DuckDB and MySQL refuse it, SQLite
        as soon as a name is ambiguous, but MariaDB and SQLite let derived tables repeat a name, so the rewritten
        query could answer where the original fails."""
        sources = [select.args["from_"].this] if select.args.get("from_") else []
        sources += [join.this for join in select.args.get("joins") or []]
        seen = set()
        for source in sources:
            alias = source.args.get("alias")
            name = (
                alias.this
                if alias is not None and alias.this
                else (source.this if isinstance(source, exp.Table) else None)
            )
            if not isinstance(name, exp.Identifier):
                continue
            key = self.names.key(name)
            if key in seen:
                raise UnsafeQueryError(
                    f"the FROM clause names {name.name} twice: give each relation a name of its own"
                )
            seen.add(key)

    def _bind_with(self, with_: exp.With, outer: dict[str, str], bound: BoundTables, fresh) -> dict[str, str]:
        """The CTE names in scope in the WITH's own query; each CTE's body bound in the scope SQL gives it."""
        recursive = bool(with_.args.get("recursive")) or self.names.ctes_see_their_whole_with
        scope = dict(outer)
        ctes = list(with_.expressions)
        keys = [self.names.cte_key(cte.args["alias"].this) for cte in ctes]
        twice = next((cte.alias for cte, key in zip(ctes, keys, strict=True) if keys.count(key) > 1), None)
        if twice is not None:
            raise UnsafeQueryError(f"the WITH clause names {twice} more than once: name each query once")
        shadowing = next((cte.alias for cte, key in zip(ctes, keys, strict=True) if key in outer), None)
        if shadowing is not None and self.names.ctes_see_their_whole_with:
            # SQLite binds a compound CTE body's own name to itself before an inner WITH of that name.
            raise UnsafeQueryError(
                f"{shadowing} names a query of an enclosing WITH too: give it a name of its own"
            )
        if recursive:  # every CTE of a WITH RECURSIVE sees all of them
            for cte in ctes:
                scope[self.names.cte_key(cte.args["alias"].this)] = next(fresh)
        for cte in ctes:
            key = self.names.cte_key(cte.args["alias"].this)
            self._walk(cte.this, scope, bound, fresh)
            if not recursive:  # visible to the CTEs after it and to the query, not to itself
                scope = {**scope, key: next(fresh)}
            cte.args["alias"].set("this", exp.to_identifier(scope[key], quoted=True))
        return scope

    def _reference(self, node: exp.Table, ctes: dict[str, str], bound: BoundTables) -> None:
        if not node.args.get("db") and not node.args.get("catalog"):
            renamed = ctes.get(self.names.cte_key(node.this))
            if renamed is not None:
                alias = node.args.get("alias") or exp.TableAlias(this=node.this.copy())
                node.set("this", exp.to_identifier(renamed, quoted=True))
                node.set("alias", alias)
                node.meta[BOUND] = True
                return
        bound.references.append(TableReference(node))


def replace_references(bound: BoundTables, replacement: Callable[[TableReference], exp.Expression]) -> None:
    """Each catalog reference of `bound` replaced, in place, by what `replacement` makes of it (whose own table
    references it marks BOUND)."""
    for reference in bound.references:
        new = replacement(reference)
        if new is not reference.node:
            reference.node.replace(new)


def mark_bound(tree: exp.Expression) -> exp.Expression:
    """`tree` with every table reference in it marked BOUND: a name this program wrote (a table's exact name)."""
    for table in tree.find_all(exp.Table):
        table.meta[BOUND] = True
    return tree


def check_all_bound(tree: exp.Expression) -> None:
    """Refuse a generated query holding a table reference that binding did not make: it would reach the engine
    as written, past the rules."""
    for table in tree.find_all(exp.Table):
        # A table function is no name: the function allow list judges it.
        if not isinstance(table.this, exp.Func) and not table.meta.get(BOUND):
            raise UnsafeQueryError(
                f"{table.sql()} could not be bound to a table of its query's scope: write the query without it"
            )

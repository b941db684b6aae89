"""A query rewritten to run over visible-only relations: every table reference is bound (binder.py) and replaced.
A table that no rule touches becomes its exact catalog name; one that a rule touches becomes a derived table,
`(SELECT its visible columns FROM it WHERE its row filters) AS the reference's alias`, whose filters the engine
must apply before anything the query asks of the rows; a view over such tables becomes its own definition, so
rewritten. What reaches the engine is generated from that tree, never the text sent: no clause of it can name a
hidden column or see a dropped row, whatever a name in the query means to the engine."""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, UnsupportedError

from dbtools.access.binder import TableBinder, TableReference, check_all_bound, mark_bound, replace_references
from dbtools.access.dialect_syntax import refuse_catalog_types, refuse_syntax_the_engine_lacks
from dbtools.access.names import NameRules
from dbtools.access.result_names import result_names
from dbtools.access.rules import VisibilityRules
from dbtools.engines import Database, TableInfo
from dbtools.errors import UnknownObjectError, UnsafeQueryError
from dbtools.name_hints import closest_hint

REMEMBERED_REWRITES = 256
MAX_VIEW_DEPTH = 8
# What keeps an engine from evaluating the query's own conditions on rows the filters drop (a failing CAST would
# tell such a row exists): a derived table with OFFSET/LIMIT is neither merged into the query nor given its
# conditions (PostgreSQL, SQLite, MySQL/MariaDB, DuckDB).
_FENCES = {
    "postgres": lambda q: q.offset(0),
    "sqlite": lambda q: q.limit(-1).offset(0),
    "mysql": lambda q: q.limit(exp.Literal.number("18446744073709551615")),
    "duckdb": lambda q: q.offset(0),
}
# Table clauses that cannot follow a table into a derived table.
_TABLE_CLAUSES = (
    "sample",
    "partition",
    "system_time",
    "version",
    "changes",
    "indexed",
    "hints",
    "pivots",
    "when",
    "joins",
    "laterals",
)


class RowFilters:
    """The row filters of one rewritten query, each held in the tree by a placeholder name and written into the
    generated text as the configuration wrote it: generated again by sqlglot, a condition could change its meaning
    (DuckDB's `~` matches the whole string, the regexp_matches() sqlglot writes for it does not)."""

    def __init__(self, nonce: str) -> None:
        self._prefix = f"sqlscout_filter_{nonce}_"  # unguessable: a query cannot name a placeholder itself
        self._conditions: list[str] = []

    def placeholder(self, condition: str) -> exp.Column:
        self._conditions.append(condition)
        return exp.column(f"{self._prefix}{len(self._conditions)}", quoted=True)

    def written_into(self, generated: str, dialect) -> str:
        for number, condition in enumerate(self._conditions, 1):
            marker = exp.to_identifier(f"{self._prefix}{number}", quoted=True).sql(dialect=dialect)
            # On lines of their own: a condition ending in a -- comment ends the comment, not the query.
            generated = generated.replace(marker, f"(\n{condition}\n)")
        return generated


@dataclass(frozen=True)
class Relation:
    """What a reference to one visible catalog table or view becomes."""

    info: TableInfo
    columns: list[str]  # the visible ones, in catalog order
    filters: list[str]
    definition: exp.Query | None = None  # a view over what the rules touch, read through


class VisibleQueries:
    """Rewrites the queries of one source's catalog under one rule set. Thread-safe: a rewrite shares nothing
    mutable with another."""

    def __init__(
        self,
        db: Database,
        catalog: list[TableInfo],
        rules: VisibilityRules,
        views: dict[str, exp.Query],
        excluded: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """`db`: the engine (exact table references); `catalog`: every table and view; `views`: the definitions of
        the views to read through, by catalog name; `excluded`: views hidden because they read what is."""
        self.db = db
        self.dialect = db.dialect
        self.rules = rules
        self.names = NameRules(self.dialect, db.case_sensitive_tables)
        # A parent's reference reads its inheritance children's rows too, past their own rules: it reads its own.
        self._parents = db.inheritance_parents()
        self._binder = TableBinder(self.names)
        self.relations: dict[str, Relation] = {}
        self._keys: dict[tuple[str, ...], str] = {}
        for info in catalog:
            if not rules.table_visible(info.name) or info.name in excluded:
                continue
            columns = [c.name for c in info.columns if rules.column_visible(info.name, c.name)]
            self.relations[info.name] = Relation(
                info, columns, rules.row_filters_of(info.name), views.get(info.name)
            )
            for key in self._written_keys(info.name):
                self._keys.setdefault(key, info.name)
        # A model repeats its queries, and a listing counts the same tables again: each is rewritten once.
        self.rewrite = functools.lru_cache(maxsize=REMEMBERED_REWRITES)(self._rewrite)

    def _written_keys(self, name: str) -> list[tuple[str, ...]]:
        """Every way a query may name the catalog table `name`, in compared form."""
        parts = tuple(self.names.catalog_key(p.name) for p in self.db.table_reference(name).parts)
        keys = [parts]
        if self.dialect == "postgres" and parts[0] == "public":
            keys.append(parts[1:])
        elif self.dialect == "sqlite":
            keys.append(("main", *parts))
        elif self.dialect == "duckdb":
            keys.append(parts[1:])
            if parts[1] == "main":
                keys.append(parts[2:])
        return keys

    def touches(self, name: str) -> bool:
        relation = self.relations.get(name)
        return relation is not None and self._rewritten(relation)

    def _rewritten(self, relation: Relation) -> bool:
        return (
            relation.definition is not None
            or relation.filters != []
            or len(relation.columns) != len(relation.info.columns)
        )

    def _rewrite(self, sql: str) -> str:
        """The query to run instead of `sql` (which passed the read-only policy); raises UnknownObjectError or
        UnsafeQueryError."""
        try:
            return self._generate(sql)
        except RecursionError:
            raise UnsafeQueryError(
                "the query is nested too deeply to check: flatten its subqueries"
            ) from None

    def _generate(self, sql: str) -> str:
        try:
            tree = sqlglot.parse_one(sql, read=self.dialect)
        except ParseError as error:
            raise UnsafeQueryError(f"the query could not be parsed: {error}") from None
        refuse_syntax_the_engine_lacks(tree, self.dialect)
        refuse_catalog_types(tree, self.dialect)
        # An engine that names a result column without an alias by its text would name it by the rewritten text,
        # which holds the filters: it gets the name the engine gives the text as written.
        names = result_names(sql, tree, self.db)
        filters = RowFilters(secrets.token_hex(8))
        tree = self.visible(tree, filters)
        check_all_bound(tree)
        for projection, name in names:
            projection.replace(exp.alias_(projection.copy(), name, quoted=True))
        try:
            # A clause the engine lacks would be left out of the generated query, not refused by the engine.
            generated = tree.sql(dialect=self.db.written_dialect, unsupported_level=ErrorLevel.RAISE)
        except UnsupportedError as error:
            raise UnsafeQueryError(f"the query uses SQL that {self.dialect} does not read: {error}") from None
        return filters.written_into(generated, self.db.written_dialect)

    def visible(self, tree: exp.Expression, filters: RowFilters, depth: int = 0) -> exp.Expression:
        """`tree` (changed in place) over visible-only relations, its row filters held by `filters`."""
        bound = self._binder.bind(tree)
        replace_references(bound, lambda reference: self._replacement(reference, filters, depth))
        return bound.tree

    def _replacement(self, reference: TableReference, filters: RowFilters, depth: int) -> exp.Expression:
        node = reference.node
        key = tuple(self.names.key(part) for part in node.parts)
        name = self._keys.get(key)
        if name is None:
            visible = list(self.relations)
            raise UnknownObjectError(
                f'no table named "{reference.written}"' + closest_hint(reference.written, visible, "tables")
            )
        relation = self.relations[name]
        exact = mark_bound(self.db.table_reference(name))
        if name in self._parents:
            exact.set("only", True)
        if not self._rewritten(relation):
            for part in ("this", "db", "catalog", "only"):
                node.set(part, exact.args.get(part))
            return mark_bound(node)
        clauses = [key for key in _TABLE_CLAUSES if node.args.get(key)]
        if clauses:
            raise UnsafeQueryError(
                f"{clauses[0].upper()} on {reference.written} is not supported here, since its rows are filtered "
                "or some of its columns hidden: query it without"
            )
        alias = node.args.get("alias") or exp.TableAlias(this=node.this.copy())
        if relation.definition is not None:
            if depth >= MAX_VIEW_DEPTH:
                raise UnsafeQueryError(f"views nested more than {MAX_VIEW_DEPTH} deep cannot be checked")
            source = self.visible(relation.definition.copy(), filters, depth + 1).subquery(
                alias="sqlscout_view"
            )
        else:
            source = exact
            if node.args.get("only"):
                source.set("only", True)
        inner = exp.select(*[exp.column(c, quoted=True) for c in relation.columns]).from_(source)
        for condition in relation.filters:
            inner = inner.where(filters.placeholder(condition))
        if relation.filters:
            inner = _FENCES[self.dialect](inner)
        return exp.Subquery(this=inner, alias=alias)

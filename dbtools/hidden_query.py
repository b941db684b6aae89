"""A read-only query rewritten so that it can read only what a source's rules show: every table it names must be
visible, every column it reads must resolve (sqlglot's scope and qualification) to a visible one, `*` expands to
the visible columns, whole-row references are refused, and each filtered table becomes a filtered derived table.

A hidden table or column gets exactly the message a name that does not exist gets."""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from dbtools.engines import TableInfo
from dbtools.errors import UnknownObjectError, UnsafeQueryError
from dbtools.name_hints import closest_hint
from dbtools.visibility import VisibilityRules

REMEMBERED_REWRITES = 256
MAX_VIEW_DEPTH = 8
# The stars a query may keep: count(*) counts rows, it reads no column.
_ROW_COUNTING = (exp.Count,)


def _unknown_table(name: str, visible: list[str]) -> UnknownObjectError:
    """The error Database.table gives a name it does not know, with close matches among the visible tables."""
    return UnknownObjectError(f'no table named "{name}"' + closest_hint(name, visible, "tables"))


def _unknown_column(detail: str) -> UnknownObjectError:
    return UnknownObjectError(f"a column the query names does not exist: {detail}")


class HiddenDataGuard:
    """Rewrites queries for one source's catalog under its rules."""

    def __init__(
        self,
        dialect: str,
        tables: list[TableInfo],
        rules: VisibilityRules,
        views: dict[str, exp.Expression] | None = None,
    ) -> None:
        self.dialect = dialect
        self.rules = rules
        # Views over what the rules touch, by lower-case name: read through their definitions, so the rules
        # reach inside them.
        self._views = views or {}
        self._tables = {info.name.lower(): info for info in tables}  # visible tables, visible columns only
        # A model repeats its queries, and a listing counts the same tables again: each is rewritten once.
        self.rewrite = functools.lru_cache(maxsize=REMEMBERED_REWRITES)(self._rewrite)

    def _nested_schema(self, tables: list[TableInfo]) -> dict:
        """sqlglot's schema of the tables a query names (the whole catalog would cost more to build than the
        query to run): {schema: {table: {column: type}}} when one is schema-qualified, else flat."""
        qualified = any("." in info.name for info in tables)
        schema: dict = {}
        for info in tables:
            columns = {c.name: c.type or "TEXT" for c in info.columns}
            if qualified:
                owner, _, name = info.name.rpartition(".")
                schema.setdefault(owner or self._default_schema(), {})[name] = columns
            else:
                schema[info.name] = columns
        return schema

    def _default_schema(self) -> str:
        return {"postgres": "public"}.get(self.dialect, "main")

    def _rewrite(self, sql: str) -> str:
        """The query to run instead of `sql`; raises UnknownObjectError or UnsafeQueryError."""
        try:
            tree = sqlglot.parse_one(sql, read=self.dialect)
        except ParseError as error:
            raise UnsafeQueryError(f"the query could not be parsed: {error}") from None
        tree = self._inline_views(tree)
        ctes, named = self._check_tables(tree)
        try:
            tree = qualify(
                tree,
                schema=self._nested_schema(named),
                dialect=self.dialect,
                expand_stars=True,
                validate_qualify_columns=True,
                identify=False,
            )
        except OptimizeError as error:
            raise _unknown_column(str(error).split(". Line:")[0]) from None
        self._check_whole_rows(tree)
        # After qualification: a filter may test a column the caller cannot see, and is the rules' own SQL.
        return self._filter_rows(tree, ctes).sql(dialect=self.dialect)

    def is_view_over_rules(self, name: str) -> bool:
        """Whether `name` is a view read through its definition (what it shows depends on the rules)."""
        return name.lower() in self._views

    def _inline_views(self, tree: exp.Expression) -> exp.Expression:
        """Each reference to one of the views becomes its definition, as a derived table of the same name."""
        if not self._views:
            return tree
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}

        def inlined(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
                return node
            name = ".".join(part.name for part in node.parts).lower()
            if (not node.db and name in ctes) or name not in self._views:
                return node
            return self._views[name].copy().subquery(alias=exp.to_identifier(node.alias or node.name))

        for _ in range(MAX_VIEW_DEPTH):  # a view over a view over ...
            tree = tree.transform(inlined, copy=True)
            if not any(
                isinstance(node.this, exp.Identifier) and node.name.lower() in self._views
                for node in tree.find_all(exp.Table)
            ):
                return tree
        raise UnsafeQueryError(f"views nested more than {MAX_VIEW_DEPTH} deep cannot be checked")

    def _check_tables(self, tree: exp.Expression) -> tuple[set[str], list[TableInfo]]:
        """Every table the query names is a visible table or one of its own CTEs; nothing else is read. Returns
        the CTEs' names and the tables named."""
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        visible = [info.name for info in self._tables.values()]
        named: dict[str, TableInfo] = {}
        for table in tree.find_all(exp.Table):
            if not isinstance(
                table.this, exp.Identifier
            ):  # a table function: read_csv(), duckdb_columns(), ...
                raise _unknown_table(table.sql(dialect=self.dialect), visible)
            name = ".".join(part.name for part in table.parts)
            if not table.db and name.lower() in ctes:
                continue
            info = self._lookup(table)
            if info is None:
                raise _unknown_table(name, visible)
            named[info.name] = info
        return ctes, list(named.values())

    def _lookup(self, table: exp.Table) -> TableInfo | None:
        name = table.name.lower()
        if table.db:
            qualified = f"{table.db}.{table.name}".lower()
            found = self._tables.get(qualified)
            if found is None and table.db.lower() == self._default_schema():
                found = self._tables.get(name)
            return found
        return self._tables.get(name)

    def _filter_rows(self, tree: exp.Expression, ctes: set[str]) -> exp.Expression:
        """Each reference to a table with row filters becomes `(SELECT its visible columns FROM it WHERE ...)`
        under the reference's alias, wherever it appears (joins, subqueries, CTE bodies)."""
        if not self.rules.row_filters:
            return tree

        def filtered(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
                return node
            if not node.db and node.name.lower() in ctes:
                return node
            info = self._lookup(node)
            conditions = self.rules.row_filters_of(info.name) if info is not None else []
            if not conditions:
                return node
            alias = node.alias or node.name
            source = exp.Table(
                this=node.this.copy(), db=node.args.get("db"), catalog=node.args.get("catalog")
            )
            inner = exp.select(*[exp.column(c.name, quoted=True) for c in info.columns]).from_(source)
            for condition in conditions:
                inner = inner.where(sqlglot.parse_one(condition, read=self.dialect))
            return inner.subquery(alias=exp.to_identifier(alias))

        return tree.transform(filtered, copy=True)

    def _check_whole_rows(self, tree: exp.Expression) -> None:
        """No row read as one value (`row_to_json(t)`, `t::text`, `to_jsonb(t)`) and no star left unexpanded
        (`json_object(*)`, `COLUMNS(*)`, `struct_pack(*)`): either would carry the hidden columns too."""
        for star in tree.find_all(exp.Star):
            if not isinstance(star.parent, _ROW_COUNTING):
                raise UnsafeQueryError(
                    "this query reads whole rows, which here carry columns that are not shown: name the columns"
                )
        # Qualification turns a table read as a value into a TableColumn; an unqualified column left over would
        # be one too (every real column is qualified, and output aliases are not in any scope's sources).
        sources = {name.lower() for scope in traverse_scope(tree) for name in scope.sources}
        for node in tree.find_all(exp.TableColumn, exp.Column):
            if isinstance(node, exp.TableColumn) or (not node.table and node.name.lower() in sources):
                raise UnsafeQueryError(
                    f"{node.name} is a table, read here as one value with every column, shown or not: "
                    "name the columns"
                )

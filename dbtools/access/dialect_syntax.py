"""What a query under rules may not say beyond its tables: clauses an engine lacks (sqlglot writes them for that
engine as other SQL, DISTINCT ON as a window over a subquery, so a rewritten query would run where the engine
refuses the original), and types that name catalog objects (a table's row type, PostgreSQL's reg* lookups)."""

from __future__ import annotations

from sqlglot import exp

from dbtools.errors import UnsafeQueryError

_ENGINE_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MySQL", "duckdb": "DuckDB"}


def refuse_syntax_the_engine_lacks(tree: exp.Expression, dialect: str) -> None:
    """sqlglot writes some clauses that an engine lacks as other SQL (DISTINCT ON as a window over a subquery):
    the engine would refuse the query as written, so it is refused here rather than run as something else."""
    for select in tree.find_all(exp.Select):
        distinct = select.args.get("distinct")
        lacking = []
        if distinct is not None and distinct.args.get("on") is not None and dialect in ("sqlite", "mysql"):
            lacking.append("DISTINCT ON")
        if select.args.get("qualify") is not None and dialect != "duckdb":
            lacking.append("QUALIFY")
        if select.args.get("connect") is not None:
            lacking.append("CONNECT BY")
        for join in select.args.get("joins") or []:
            if join.kind in ("SEMI", "ANTI") and dialect != "duckdb":
                lacking.append(f"{join.kind} JOIN")
            if join.side == "FULL" and dialect == "mysql":
                lacking.append("FULL JOIN")
        if dialect in ("sqlite", "mysql") and any(
            alias.args.get("columns") and not isinstance(alias.parent, exp.CTE)
            for alias in select.find_all(exp.TableAlias)
        ):
            # sqlglot drops it (SQLite) or writes the VALUES it names as a SELECT (MySQL), with a warning only
            lacking.append("a column list after a table's alias")
        if lacking:
            raise UnsafeQueryError(
                f"{lacking[0]} is not SQL that {_ENGINE_NAMES[dialect]} reads: write it without"
            )


def refuse_catalog_types(tree: exp.Expression, dialect: str) -> None:
    """A cast to a type that is not built in may be a table's row type (`NULL::secrets` has its columns), and
    PostgreSQL's reg* types look objects up by name (`'secrets'::regclass`): both tell what is hidden."""
    for data_type in tree.find_all(exp.DataType):
        written = data_type.sql(dialect=dialect)
        if data_type.this == exp.DataType.Type.USERDEFINED or written.upper().startswith("REG"):
            raise UnsafeQueryError(f"the type {written} is not allowed here: cast to a built-in type")

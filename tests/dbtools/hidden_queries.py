"""The hidden-data oracle's queries over redacted_pair's schema: every known way to reach a hidden table, column or
row, with its variants; the ordinary queries that must keep working; and a grammar (hypothesis) that combines
CTEs, joins of every kind, subqueries in every clause, set operations, window functions and aliases that collide
with table and column names. `{Q:Name}` is a mixed-case name quoted as the engine quotes it."""

from __future__ import annotations

import re

from hypothesis import strategies as st

from tests.dbtools.redacted_pair import TABLES, quote

ATTACKS = [
    # Row counts chosen by hidden data: a subquery in LIMIT or OFFSET (where the engine takes one).
    "SELECT id FROM bonuses ORDER BY id LIMIT (SELECT count(*) FROM customers WHERE region = 'US')",
    "SELECT id FROM bonuses ORDER BY id LIMIT 1 OFFSET (SELECT count(*) FROM secrets)",
    "SELECT id FROM bonuses ORDER BY id LIMIT (SELECT max(length(email)) FROM customers) - 20",
    # Aggregates counted, grouped or ordered by hidden data: FILTER, GROUPING SETS and ROLLUP, an ORDER BY or a
    # division whose value or error comes from a hidden column or table.
    "SELECT count(*) FILTER (WHERE email LIKE '%@%') FROM customers",
    "SELECT region, count(*) FILTER (WHERE margin > 0) FROM orders GROUP BY region",
    "SELECT region, count(*) FROM customers GROUP BY ROLLUP (region)",
    "SELECT region, email, count(*) FROM customers GROUP BY GROUPING SETS ((region), (email))",
    "SELECT id FROM bonuses ORDER BY (SELECT count(*) FROM secrets WHERE secrets.id = bonuses.id), id",
    "SELECT id FROM orders ORDER BY margin, id",
    "SELECT 1 / (SELECT count(*) FROM customers WHERE email = 'nobody') AS x",
    "SELECT sum(total) / nullif(sum(margin), 0) FROM orders",
    # A CTE named like a table, in another scope than the table's reference.
    "SELECT secrets.token FROM secrets, (WITH secrets AS (SELECT 1 AS x) SELECT x FROM secrets) z",
    "SELECT c.name FROM customers c, (WITH customers AS (SELECT 1 AS x) SELECT x FROM customers) z",
    "SELECT (WITH customers AS (SELECT 1 AS id) SELECT count(*) FROM customers) AS n, count(*) FROM customers",
    "WITH x AS (SELECT * FROM customers) SELECT * FROM x, (WITH customers AS (SELECT 2 AS y) SELECT y FROM customers) z",
    "WITH customers AS (SELECT * FROM customers) SELECT * FROM customers",
    "WITH secrets AS (SELECT * FROM secrets) SELECT * FROM secrets",
    "WITH RECURSIVE customers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM customers WHERE n < 3) SELECT * FROM customers",
    "WITH a AS (SELECT 1 AS x), customers AS (SELECT x FROM a) SELECT * FROM customers",
    "WITH a AS (SELECT * FROM customers) SELECT * FROM a WHERE region = 'US'",
    # Aliases that are other tables' names.
    "SELECT orders.name FROM customers AS orders",
    "SELECT customers.total FROM orders AS customers",
    "SELECT {Q:Invoice}.{Q:Email} FROM {Q:Customer} AS {Q:Invoice}",
    "SELECT secrets.name FROM customers secrets",
    "SELECT * FROM pg_stats, (WITH pg_stats AS (SELECT 1 AS x) SELECT x FROM pg_stats) z",
    "SELECT sql FROM sqlite_master, (WITH sqlite_master AS (SELECT 1 AS x) SELECT x FROM sqlite_master) z",
    "SELECT token FROM secrets WHERE EXISTS (WITH secrets AS (SELECT 1) SELECT * FROM secrets)",
    # Correlated subqueries and LATERAL over hidden columns.
    "SELECT (SELECT c.{Q:Email} FROM {Q:Customer} c WHERE c.{Q:CustomerId} = i.{Q:CustomerId}) FROM {Q:Invoice} i",
    "SELECT (SELECT email FROM customers c2 WHERE c2.id = o.customer_id) FROM orders o",
    "SELECT (SELECT max(salary) FROM employees) FROM bonuses",
    "SELECT l.e FROM {Q:Invoice} i, LATERAL (SELECT c.{Q:Email} AS e FROM {Q:Customer} c WHERE c.{Q:CustomerId} = i.{Q:CustomerId}) l",
    "SELECT l.s FROM bonuses b, LATERAL (SELECT e.salary AS s FROM employees e WHERE e.id = b.id) l",
    "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c WHERE c.id = o.customer_id AND c.region = 'US')",
    "SELECT id FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE margin > 100)",
    # Every clause naming a hidden column.
    "SELECT email FROM customers",
    "SELECT {Q:Email} FROM {Q:Customer}",
    "SELECT name FROM customers WHERE email LIKE 'ZQX%'",
    "SELECT name FROM customers ORDER BY email",
    "SELECT count(*) FROM customers GROUP BY email",
    "SELECT name FROM employees GROUP BY name HAVING max(salary) > 6000",
    "SELECT name, row_number() OVER (ORDER BY salary) FROM employees",
    "SELECT name, sum(total) OVER (PARTITION BY margin) FROM orders o JOIN customers c ON c.id = o.customer_id",
    "SELECT * FROM customers c JOIN orders o ON o.margin = c.id",
    # Stars, whole rows and positions.
    "SELECT * FROM customers",
    "SELECT c.* FROM customers c",
    "SELECT * FROM {Q:Customer}",
    "SELECT * FROM {Q:Invoice}",
    "SELECT x.* FROM (SELECT * FROM employees) x",
    "SELECT * FROM customers NATURAL JOIN orders",
    "SELECT * FROM employees NATURAL JOIN bonuses",
    "SELECT e.name FROM employees e NATURAL JOIN bonuses b",
    "SELECT * FROM employees JOIN bonuses USING (salary)",
    "SELECT * FROM employees JOIN bonuses USING (id)",
    # ORDER BY and DISTINCT ON names that are select aliases and columns at once.
    "SELECT name AS salary FROM employees ORDER BY salary",
    "SELECT name AS salary FROM employees ORDER BY salary + 0",
    "SELECT name AS email FROM customers ORDER BY email || ''",
    "SELECT id AS margin FROM orders ORDER BY -margin",
    "SELECT DISTINCT ON (salary) name FROM employees",
    "SELECT DISTINCT ON (salary) name AS salary FROM employees ORDER BY salary",
    "SELECT name AS salary FROM employees ORDER BY (salary > 6000), name",
    "SELECT name AS salary FROM employees GROUP BY name ORDER BY max(salary)",
    # Filtered-out rows.
    "SELECT * FROM orders",
    "SELECT count(*) FROM orders",
    "SELECT sum(total), max(note) FROM orders",
    "SELECT note FROM orders WHERE region = 'US' OR 1 = 1",
    "SELECT * FROM {Q:Invoice} WHERE {Q:Total} > 100",
    "SELECT count(*) FROM {Q:Invoice}",
    "SELECT name FROM customers UNION SELECT note FROM orders",
    "SELECT id FROM orders WHERE CAST(note AS INTEGER) > 5",
    "SELECT id FROM orders WHERE note = 'ZQX-note'",
    "SELECT * FROM eu_view",
    "SELECT name FROM eu_view WHERE region = 'US'",
    "SELECT * FROM email_view",
    # Qualified names and catalogs.
    "SELECT * FROM main.secrets",
    "SELECT * FROM public.secrets",
    "SELECT * FROM main.customers",
    "SELECT * FROM public.customers",
    "SELECT * FROM SECRETS",
    "SELECT salary FROM original.main.employees",
    "SELECT * FROM original.main.customers",
    "SELECT token FROM original.main.secrets",
    "SELECT #3 FROM customers",
    "SELECT #4 FROM employees",
    "SELECT * FROM original.main.eu_view",
    'SELECT * FROM "secrets"',
    "SELECT * FROM information_schema.columns",
    "SELECT * FROM sqlite_master",
    "SELECT * FROM pg_catalog.pg_stats",
    "SELECT * FROM pg_class",
    "SELECT * FROM mysql.user",
    "SELECT * FROM duckdb_columns()",
    "SELECT * FROM performance_schema.threads",
    # Functions that read the catalog or a table by name, or write.
    "SELECT table_to_xml('secrets', true, false, '')",
    "SELECT query_to_xml('SELECT * FROM secrets', true, false, '')",
    "SELECT to_regclass('secrets')",
    "SELECT pg_get_viewdef('email_view')",
    "SELECT has_column_privilege('customers', 'email', 'SELECT')",
    "SELECT gin_clean_pending_list('x')",
    "SELECT brin_summarize_new_values('x')",
    "SELECT pg_nextoid('pg_class', 'oid', 'pg_class_oid_index')",
    "SELECT row_to_json(c) FROM customers c",
    "SELECT to_jsonb(c) FROM customers c",
    "SELECT c FROM customers c",
    "SELECT json_object(*) FROM customers",
    "SELECT COLUMNS(*) FROM customers",
    "SELECT struct_pack(*) FROM customers",
    "SELECT LOAD_FILE('/etc/passwd')",
    # Subqueries inside a table's own clauses.
    "SELECT count(*) FROM bonuses TABLESAMPLE BERNOULLI ((SELECT CAST(string_agg(note || ':' || margin, ',') AS float8) FROM orders))",
    "SELECT count(*) FROM bonuses TABLESAMPLE BERNOULLI ((SELECT CASE WHEN token LIKE 'ZQX%' THEN 100 ELSE 0 END FROM secrets))",
    "SELECT count(*) FROM bonuses AS b TABLESAMPLE SYSTEM ((SELECT CAST(count(*) AS float8) FROM email_view))",
    # Types that are tables' rows, and lookups of objects by name.
    "SELECT (NULL::customers).*",
    "SELECT (NULL::secrets).*",
    "SELECT (NULL::employees).salary",
    "SELECT 'secrets'::regclass",
    "SELECT CAST('secrets' AS regclass)",
    "SELECT CAST(CAST(n AS oid) AS regclass) FROM generate_series(16384, 16700) AS n",
    # Result columns named by their text, which after rewriting would hold the filters.
    "SELECT (SELECT count(*) FROM orders) /* x */",
    "SELECT (SELECT count(*) FROM orders) -- a, b\n",
    "SELECT * FROM (SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM orders)) AS x",
    "WITH w AS (SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM orders)) SELECT * FROM w",
    "SELECT {'a': 1, 'b': 2}, (SELECT count(*) FROM orders)",
    "SELECT * FROM (SELECT {'a': 1, 'b': 2}, (SELECT count(*) FROM orders)) AS x",
    "SELECT * FROM (customers CROSS JOIN bonuses)",
    # Named windows, VALUES named like a hidden table, DuckDB's star modifiers and column patterns.
    "SELECT name, rank() OVER w FROM employees WINDOW w AS (ORDER BY salary)",
    "SELECT name, count(*) OVER w FROM orders o JOIN customers c ON c.id = o.customer_id WINDOW w AS (PARTITION BY email)",
    "SELECT secrets.token FROM (VALUES (1, 'x')) AS secrets(id, token)",
    "SELECT s.token FROM (VALUES (1, 'x')) AS s(id, token) JOIN secrets ON secrets.id = s.id",
    "SELECT * EXCLUDE (name) FROM employees",
    "SELECT * REPLACE (salary + 1 AS salary) FROM employees",
    "SELECT COLUMNS('sal.*') FROM employees",
    "SELECT COLUMNS('.*') FROM customers",
    "SELECT region, count(*) FROM orders GROUP BY ALL",
    "SELECT * FROM employees NATURAL FULL JOIN bonuses",
    "SELECT name FROM customers ORDER BY 4",
    "SELECT * FROM customers WHERE (id, region) IN (SELECT customer_id, region FROM orders)",
]
# What an assistant or the agent asks of visible data: never refused, always as the redacted copy answers.
LEGITIMATE = [
    "SELECT id, name, region FROM customers",
    "SELECT * FROM customers",
    "SELECT * FROM orders ORDER BY id",
    "SELECT count(*) FROM orders",
    "SELECT COUNT( * ) FROM customers",
    "SELECT region, count(*) AS n FROM customers GROUP BY region",
    "SELECT c.name, sum(o.total) AS spent FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
    "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE total > 5)",
    "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
    "WITH spent AS (SELECT customer_id, sum(total) AS s FROM orders GROUP BY customer_id) SELECT * FROM spent",
    "SELECT upper(name), length(name), lower(region) FROM customers ORDER BY name",
    "SELECT name, row_number() OVER (ORDER BY name) AS r FROM customers",
    "SELECT id, total, rank() OVER (ORDER BY total DESC) FROM orders",
    "SELECT name FROM employees ORDER BY name LIMIT 2",
    "SELECT e.name, b.salary FROM employees e JOIN bonuses b ON b.id = e.id",
    "SELECT * FROM employees NATURAL JOIN bonuses",
    "SELECT avg(salary), min(salary) FROM bonuses",
    "SELECT coalesce(note, 'none') FROM orders",
    "SELECT CASE WHEN total > 15 THEN 'big' ELSE 'small' END AS size FROM orders",
    "SELECT {Q:Name} FROM {Q:Customer} ORDER BY {Q:CustomerId}",
    "SELECT c.{Q:Name}, sum(i.{Q:Total}) FROM {Q:Customer} c JOIN {Q:Invoice} i ON i.{Q:CustomerId} = c.{Q:CustomerId} GROUP BY c.{Q:Name}",
    "SELECT * FROM {Q:Invoice}",
    "SELECT * FROM eu_view",
    "SELECT name FROM customers UNION SELECT name FROM employees",
    "SELECT DISTINCT region FROM orders",
    "SELECT id FROM orders WHERE note LIKE '1%'",
    "SELECT max(total) - min(total) AS spread FROM orders",
    "SELECT name FROM customers WHERE name IN ('Ada', 'Grace')",
    "SELECT round(avg(total), 1) FROM orders",
    "SELECT count(DISTINCT customer_id) FROM orders",
]


def for_engine(sql: str, engine: str) -> str:
    return re.sub(r"\{Q:(\w+)\}", lambda m: quote(m.group(1), engine), sql)


_COLUMNS = {name: [(c, kind.startswith("INT")) for c, kind, _ in columns] for name, columns, _, _ in TABLES}
_COLUMNS["eu_view"] = [("id", True), ("name", False), ("region", False)]
_COLUMNS["email_view"] = [("id", True), ("email", False)]
# Visible tables most often; the hidden table, the hidden view and a name that does not exist now and then.
_TABLE_NAMES = st.sampled_from(
    ["customers", "orders", "employees", "bonuses", "Customer", "Invoice", "eu_view"] * 4
    + ["secrets", "email_view", "nowhere"]
)
_ANY_COLUMN = [(c, numeric) for columns in _COLUMNS.values() for c, numeric in columns] + [("x", True)]
_ALIASES = ["a", "b", "x", *_COLUMNS]


@st.composite
def queries(draw, engine: str, depth: int = 2) -> str:
    """A query of the grammar, written for `engine`."""
    q = lambda name: quote(name, engine) if name != name.lower() else name  # noqa: E731
    ctes = []
    if depth > 0 and draw(st.integers(0, 2)) == 0:
        for _ in range(draw(st.integers(1, 2))):
            name = draw(st.sampled_from(_ALIASES))
            ctes.append(f"{q(name)} AS ({draw(queries(engine, depth - 1))})")
    body = draw(_select(engine, depth, q))
    if draw(st.integers(0, 4)) == 0:
        operator = draw(st.sampled_from(["UNION", "UNION ALL", "EXCEPT", "INTERSECT"]))
        body = f"{body} {operator} {draw(_select(engine, 0, q))}"
    elif depth == 2 and draw(st.integers(0, 2)) == 0:
        body += f" ORDER BY {draw(st.integers(1, 1))}"
    return (f"WITH {', '.join(ctes)} " if ctes else "") + body


@st.composite
def _select(draw, engine: str, depth: int, q) -> str:
    sources = []  # (the alias, or the table as written; its columns)
    items = []
    for index in range(draw(st.integers(1, 2))):
        if depth > 0 and draw(st.integers(0, 4)) == 0:
            alias = draw(st.sampled_from(_ALIASES))
            item = f"({draw(queries(engine, depth - 1))}) AS {q(alias)}"
            columns = _ANY_COLUMN
        else:
            table = draw(_TABLE_NAMES)
            alias = draw(st.sampled_from([None, None, *_ALIASES]))
            item = q(table) + (f" AS {q(alias)}" if alias else "")
            alias = alias or table
            columns = _COLUMNS.get(table, _ANY_COLUMN)
        if index:
            join = draw(st.sampled_from(["JOIN", "LEFT JOIN", "NATURAL JOIN", "CROSS JOIN", ",", "USING"]))
            if join == "USING":
                item = f"JOIN {item} USING ({q(draw(st.sampled_from(columns))[0])})"
            elif join in ("JOIN", "LEFT JOIN"):
                item = f"{join} {item} ON {draw(_condition(sources + [(alias, columns)], q, engine, 0))}"
            else:
                item = f"{join} {item}"
        items.append(item)
        sources.append((alias, columns))
    if draw(st.integers(0, 3)) == 0:  # an aggregate query
        group = draw(_column(sources, q))
        projections = [group[0], draw(st.sampled_from(["count(*)", f"max({draw(_column(sources, q))[0]})"]))]
        tail = f" GROUP BY {group[0]}"
    else:
        projections = draw(st.lists(_projection(sources, q, engine, depth), min_size=1, max_size=3))
        tail = ""
    where = f" WHERE {draw(_condition(sources, q, engine, depth))}" if draw(st.booleans()) else ""
    distinct = "DISTINCT " if draw(st.integers(0, 3)) == 0 else ""
    return f"SELECT {distinct}{', '.join(projections)} FROM {' '.join(items)}{where}{tail}"


@st.composite
def _column(draw, sources, q) -> tuple[str, bool]:
    """A column reference and whether it is numeric: mostly a column of a source in scope."""
    alias, columns = draw(st.sampled_from(sources))
    column, numeric = draw(st.sampled_from(columns if draw(st.integers(0, 7)) else _ANY_COLUMN))
    return (f"{q(alias)}.{q(column)}" if draw(st.booleans()) else q(column)), numeric


@st.composite
def _projection(draw, sources, q, engine: str, depth: int) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return "*"
    if kind == 1:
        return f"{q(draw(st.sampled_from(sources))[0])}.*"
    if kind == 2:
        # rank(), not row_number(): the numbers of tied rows are the engine's choice on each database.
        return f"rank() OVER (ORDER BY {draw(_column(sources, q))[0]})"
    if kind == 3 and depth > 0:
        table = draw(_TABLE_NAMES)
        return f"(SELECT count(*) FROM {q(table)} WHERE {draw(_condition(sources, q, engine, 0))})"
    column, _ = draw(_column(sources, q))
    if kind == 4:
        return f"{column} AS {q(draw(st.sampled_from(_ANY_COLUMN))[0])}"
    return column


@st.composite
def _condition(draw, sources, q, engine: str, depth: int) -> str:
    column, numeric = draw(_column(sources, q))
    kind = draw(st.integers(0, 4))
    if kind == 0:
        other, other_numeric = draw(_column(sources, q))
        return f"{column} = {other}" if numeric == other_numeric else f"{column} IS NOT NULL"
    if kind == 1:
        return f"{column} IS NOT NULL"
    if kind == 2 and depth > 0:
        table = draw(_TABLE_NAMES)
        inner, _ = draw(st.sampled_from(_COLUMNS.get(table, _ANY_COLUMN)))
        return f"EXISTS (SELECT 1 FROM {q(table)} WHERE {q(inner)} = {column})"
    return f"{column} > 5" if numeric else f"{column} LIKE 'Z%'"

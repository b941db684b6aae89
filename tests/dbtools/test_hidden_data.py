"""The hidden-data suite: a source whose rules hide a table, hide columns and filter rows, on every engine. Every
hidden cell and every filtered-out row holds a marker; no query trick, no tool and no error shows it, and a hidden
name is answered exactly as a name that does not exist."""

from __future__ import annotations

import re
import sqlite3
import uuid

import anyio
import duckdb
import psycopg
import pytest
from mcp import Client

from dbtools.access.rules import VisibilityRules
from dbtools.sources import ServerLimits, SourceSet, SourceSpec
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.fixture_schema import mysql_connection

MARKER = "ZQXMARKER"
RULES = VisibilityRules(
    hidden_tables=("secrets",),
    hidden_columns=("customers.email", "*.margin"),
    row_filters=(("customers", "region = 'EU'"), ("orders", "region = 'EU'")),
)
SCHEMA = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(64), email VARCHAR(64), region VARCHAR(8))",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER, margin VARCHAR(64), "
    "note VARCHAR(64), region VARCHAR(8))",
    "CREATE TABLE secrets (id INTEGER PRIMARY KEY, value VARCHAR(64))",
    # A view over a filtered table (read through its definition) and one over a hidden column (hidden too).
    "CREATE VIEW eu_view AS SELECT id, name, region FROM customers",
    "CREATE VIEW email_view AS SELECT id, email FROM customers",
]
ROWS = {
    "customers": [
        (1, "Ada", f"{MARKER}-email-1", "EU"),
        (2, "Grace", f"{MARKER}-email-2", "EU"),
        (3, f"{MARKER}-us-name", f"{MARKER}-email-3", "US"),
    ],
    "orders": [
        (1, 1, 10, f"{MARKER}-margin-1", "first", "EU"),
        (2, 2, 20, f"{MARKER}-margin-2", "second", "EU"),
        (3, 3, 30, f"{MARKER}-margin-3", f"{MARKER}-us-note", "US"),
    ],
    "secrets": [(1, f"{MARKER}-secret")],
}
# Every trick for reading a hidden column, a hidden table or a filtered-out row.
ATTEMPTS = [
    "SELECT email FROM customers",
    "SELECT EMAIL FROM customers",
    'SELECT "email" FROM customers',
    "SELECT c.email FROM customers c",
    "SELECT customers.email FROM customers",
    "SELECT * FROM customers",
    "SELECT c.* FROM customers c",
    "SELECT * FROM customers c JOIN orders o ON o.customer_id = c.id",
    "SELECT * FROM customers NATURAL JOIN orders",
    "SELECT * FROM customers JOIN orders USING (id)",
    "SELECT x.* FROM (SELECT * FROM customers) x",
    "SELECT x.email FROM (SELECT * FROM customers) x",
    "SELECT e FROM (SELECT email AS e FROM customers) t",
    "WITH c AS (SELECT * FROM customers) SELECT * FROM c",
    "WITH c AS (SELECT email FROM customers) SELECT * FROM c",
    "WITH c(a, b, e) AS (SELECT id, name, email FROM customers) SELECT e FROM c",
    "SELECT (SELECT email FROM customers c2 WHERE c2.id = c.id) FROM customers c",
    "SELECT name FROM customers WHERE email LIKE '%MARKER%'",
    "SELECT name FROM customers ORDER BY email",
    "SELECT count(*) FROM customers GROUP BY email",
    "SELECT max(email) FROM customers",
    "SELECT length(email) FROM customers",
    "SELECT name, row_number() OVER (ORDER BY email) FROM customers",
    "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE margin LIKE 'Z%')",
    "SELECT margin FROM orders",
    "SELECT o.margin FROM orders o",
    "SELECT * FROM orders",
    "SELECT sum(total) FROM orders",
    "SELECT count(*) FROM orders",
    "SELECT note FROM orders",
    "SELECT note FROM orders WHERE region = 'US'",
    "SELECT note FROM orders WHERE region <> 'EU' OR 1 = 1",
    "SELECT name FROM customers WHERE region = 'US'",
    "SELECT name FROM customers UNION SELECT note FROM orders",
    "SELECT name FROM customers UNION ALL SELECT email FROM customers",
    "SELECT * FROM secrets",
    "SELECT value FROM secrets",
    "SELECT s.value FROM secrets s",
    "SELECT * FROM SECRETS",
    'SELECT * FROM "secrets"',
    "SELECT (SELECT value FROM secrets LIMIT 1)",
    "SELECT name FROM customers WHERE EXISTS (SELECT 1 FROM secrets)",
    "WITH s AS (SELECT * FROM secrets) SELECT * FROM s",
    "SELECT * FROM customers CROSS JOIN secrets",
    "SELECT row_to_json(c) FROM customers c",
    "SELECT to_jsonb(c) FROM customers c",
    "SELECT CAST(c AS TEXT) FROM customers c",
    "SELECT c::text FROM customers c",
    "SELECT json_object(*) FROM customers",
    "SELECT struct_pack(*) FROM customers",
    "SELECT COLUMNS(*) FROM customers",
    "SELECT customers FROM customers",
    "SELECT * FROM information_schema.columns",
    "SELECT column_name FROM information_schema.columns WHERE table_name = 'customers'",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM sqlite_master",
    "SELECT sql FROM sqlite_schema",
    "SELECT * FROM pg_catalog.pg_attribute",
    "SELECT * FROM pg_class",
    "SELECT * FROM duckdb_columns()",
    "SELECT * FROM mysql.user",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT name FROM customers ORDER BY 1",
    "SELECT name FROM customers GROUP BY 1",
    "SELECT region, count(*) FROM customers GROUP BY region",
    "SELECT count(DISTINCT region) FROM orders",
    "SELECT * FROM eu_view",
    "SELECT name FROM eu_view WHERE region = 'US'",
    "SELECT * FROM email_view",
    "SELECT v.email FROM email_view v",
]
ENGINES = [
    "sqlite",
    "duckdb",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]


def fill(execute, marks: str) -> None:
    for statement in SCHEMA:
        execute(statement, ())
    for table, rows in ROWS.items():
        for row in rows:
            execute(f"INSERT INTO {table} VALUES ({', '.join([marks] * len(row))})", row)


@pytest.fixture(scope="module")
def hidden_dsn(request, tmp_path_factory):
    engine = request.param
    name = f"hidden_{uuid.uuid4().hex[:8]}"
    folder = tmp_path_factory.mktemp("hidden")
    if engine == "sqlite":
        path = folder / "hidden.sqlite"
        with sqlite3.connect(path) as conn:
            fill(conn.execute, "?")
        yield str(path)
    elif engine == "duckdb":
        path = folder / "hidden.duckdb"
        with duckdb.connect(str(path)) as conn:
            fill(conn.execute, "?")
        yield str(path)
    elif engine == "postgres":
        server = request.getfixturevalue("pg_server_dsn")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        dsn = server.rsplit("/", 1)[0] + f"/{name}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            fill(conn.execute, "%s")
        yield dsn
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    else:
        server = request.getfixturevalue("mariadb_server_dsn")
        with mysql_connection(f"{server}/mysql") as conn, conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}`")
        with mysql_connection(f"{server}/{name}") as conn, conn.cursor() as cursor:
            fill(cursor.execute, "%s")
            conn.commit()
        yield f"{server}/{name}"
        with mysql_connection(f"{server}/mysql") as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")


def served(dsn: str) -> SourceSet:
    limits = ServerLimits(timeout=5.0, max_rows=100, pool_size=4, connect_timeout=5)
    return SourceSet([SourceSpec("main", dsn, rules=RULES)], limits)


def every_text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content) + repr(result.structured_content)


def call_all(dsn: str, calls: list[tuple[str, dict]]) -> list:
    sources = served(dsn)

    async def run() -> list:
        async with Client(build_server(Settings(), sources)) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            overview = await client.read_resource("schema://overview")
            return [*results, overview.contents[0].text]

    try:
        return anyio.run(run)
    finally:
        sources.close()


@pytest.mark.parametrize("hidden_dsn", ENGINES, indirect=True)
def test_no_query_shows_a_hidden_value(hidden_dsn):
    assert len(ATTEMPTS) >= 60
    *results, _ = call_all(hidden_dsn, [("run_query", {"sql": sql}) for sql in ATTEMPTS])
    for sql, result in zip(ATTEMPTS, results, strict=True):
        assert MARKER not in every_text(result), sql
    answered = {sql: r for sql, r in zip(ATTEMPTS, results, strict=True) if not r.is_error}
    # What may be seen still is: the visible columns of the rows the filters keep.
    assert answered["SELECT * FROM customers"].structured_content["columns"] == ["id", "name", "region"]
    assert answered["SELECT * FROM customers"].structured_content["row_count"] == 2
    assert answered["SELECT count(*) FROM orders"].structured_content["rows"] == [[2]]
    assert answered["SELECT sum(total) FROM orders"].structured_content["rows"][0][0] == 30
    assert "SELECT name FROM customers WHERE region = 'US'" in answered
    assert answered["SELECT * FROM eu_view"].structured_content["row_count"] == 2
    assert "SELECT * FROM email_view" not in answered


@pytest.mark.parametrize("hidden_dsn", ENGINES, indirect=True)
def test_the_tools_show_no_hidden_table_column_or_row(hidden_dsn):
    calls = [
        ("list_tables", {}),
        ("describe_table", {"table": "customers"}),
        ("describe_table", {"table": "orders"}),
        ("describe_table", {"table": "secrets"}),
        ("describe_table", {"table": "secretz"}),
        ("search_schema", {"keywords": "email margin secrets value"}),
        ("search_values", {"text": MARKER}),
        ("search_values", {"text": f"{MARKER}-us-name"}),
        ("sample_rows", {"table": "customers", "limit": 10}),
        ("sample_rows", {"table": "orders", "limit": 10}),
        ("sample_rows", {"table": "secrets"}),
        ("explain_query", {"sql": "SELECT * FROM customers"}),
        ("explain_query", {"sql": "SELECT email FROM customers"}),
        ("run_query", {"sql": "SELECT * FROM secrets"}),
        ("run_query", {"sql": "SELECT * FROM secretz"}),
        ("run_query", {"sql": "SELECT email FROM customers"}),
        ("run_query", {"sql": "SELECT emale FROM customers"}),
        ("sample_rows", {"table": "secretz"}),
    ]
    results = call_all(hidden_dsn, calls)
    *tool_results, overview = results
    for (name, arguments), result in zip(calls, tool_results, strict=True):
        text = every_text(result)
        for echoed in arguments.values():  # a tool may repeat its own arguments
            text = text.replace(str(echoed), "")
        assert MARKER not in text, (name, arguments)
        for hidden in ("email", "margin", "secrets"):
            if hidden not in repr(arguments):
                assert hidden not in text.lower(), (name, arguments, hidden)
    listed, customers, orders, secrets, secretz, schema, values, us_name, sample_c, sample_o, sample_s = (
        tool_results[:11]
    )
    counts = {t["name"]: t["row_count"] for t in listed.structured_content["tables"]}
    assert counts == {"customers": 2, "orders": 2, "eu_view": 2}
    assert [c["name"] for c in customers.structured_content["columns"]] == ["id", "name", "region"]
    assert "margin" not in orders.structured_content["create_sql"]
    assert sample_c.structured_content["row_count"] == 2 and sample_o.structured_content["row_count"] == 2
    assert values.structured_content["matches"] == [] and us_name.structured_content["matches"] == []
    assert MARKER not in overview and "secrets" not in overview
    # A hidden name gets exactly what a name that does not exist gets.
    pairs = [
        (secrets, secretz, r"secret[sz]"),
        (sample_s, tool_results[17], r"secret[sz]"),
        (tool_results[13], tool_results[14], r"secret[sz]"),
        (tool_results[15], tool_results[16], r"ema(il|le)"),
    ]
    for hidden, missing, name in pairs:
        assert hidden.is_error and missing.is_error
        assert same_error(hidden, name) == same_error(missing, name)


def same_error(result, name: str) -> str:
    """An error's text with the name asked about, the fence's random tag and DuckDB's candidates (visible names,
    ranked by their likeness to the name asked) taken out."""
    text = re.sub(r"UNTRUSTED DATA [0-9a-f]+", "UNTRUSTED DATA", result.content[0].text)
    text = re.sub(r"Candidate bindings: .*", "", text)
    return re.sub(name, "NAME", text)


@pytest.mark.parametrize("hidden_dsn", [e for e in ENGINES if e != "sqlite" and e != "duckdb"], indirect=True)
def test_list_sources_warns_when_the_role_can_read_what_is_hidden(hidden_dsn):
    """The suite connects as a superuser, which can read everything: the warning counts it, naming nothing."""
    sources = served(hidden_dsn)

    async def run():
        async with Client(build_server(Settings(), sources, named=True)) as client:
            return await client.call_tool("list_sources", {})

    try:
        listed = anyio.run(run)
    finally:
        sources.close()
    [summary] = listed.structured_content["sources"]
    # secrets, customers.email and orders.margin
    assert "can read 3 hidden table(s) or column(s)" in summary["warning"]
    assert "email" not in every_text(listed) and "secrets" not in every_text(listed)


@pytest.mark.parametrize("hidden_dsn", ["sqlite"], indirect=True)
def test_the_agent_sees_no_hidden_value_either(hidden_dsn):
    from mcp_server.model_runner import ModelRunner
    from tests.server.scripted_policies import byte_replay

    script = [
        'Look.</think>\n{"tool": "list_tables", "args": {}}\n'
        '{"tool": "run_query", "args": {"sql": "SELECT email FROM customers"}}\n'
        '{"tool": "run_query", "args": {"sql": "SELECT * FROM secrets"}}',
        'Done.</think>\n{"tool": "submit_sql", "args": {"sql": "SELECT * FROM customers JOIN orders ON orders.customer_id = customers.id"}}',
    ]
    sources = served(hidden_dsn)
    settings = Settings()

    async def run():
        runner = ModelRunner(settings, policy=byte_replay(script))
        async with Client(build_server(settings, sources, runner)) as client:
            return await client.call_tool("ask_database", {"question": "Who ordered what?"})

    try:
        answer = anyio.run(run)
    finally:
        sources.close()
    assert not answer.is_error, answer.content[0].text
    assert MARKER not in every_text(answer)
    assert answer.structured_content["row_count"] == 2
    assert "email" not in answer.structured_content["columns"]

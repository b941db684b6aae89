"""The eight tools' outputs against the agent protocol's published examples and our documented formats."""

from __future__ import annotations

import pytest

from dbtools.agent_tools import AgentToolbox
from tests.fixture_schema import COMMON_TABLES

PUBLISHED_DESCRIBE = (
    "CREATE TABLE AlertLogs (id INTEGER PRIMARY KEY NOT NULL, alertId INTEGER, userId INTEGER, "
    "triggeredAt DATETIME, FOREIGN KEY (alertId) REFERENCES aler(id), FOREIGN KEY (userId) REFERENCES users(id))"
)
PUBLISHED_SELECT = """id | alertId | userId | triggeredAt
1 | 1 | 6 | None
2 | 4 | 5 | 2022-12-13 17:48:56
3 | 2 | 30 | None
4 | 2 | 5 | 2021-12-23 05:37:09
5 | 1 | 3 | 2021-12-15 23:51:42
... (showing first 5 rows; more rows exist)"""
# Each engine's own wording: the name it gives a COUNT(*) column, its message for an unknown column and for a
# statement that ends too early.
COUNT_HEADER = {"sqlite": "COUNT(*)", "postgres": "count", "mysql": "COUNT(*)", "duckdb": "count_star()"}
UNKNOWN_COLUMN = {
    "sqlite": "no such column: nme",
    "postgres": 'column "nme" does not exist',
    "mysql": "Unknown column 'nme'",
    "duckdb": 'Binder Error: Referenced column "nme" not found in FROM clause!',
}
INCOMPLETE = {
    "sqlite": "incomplete input",
    "postgres": "syntax error at end of input",
    "mysql": "You have an error in your SQL syntax",
    "duckdb": "Parser Error: syntax error at end of input",
}
# The protocol's eight tools, by the names the model was trained to call.
PROTOCOL_TOOLS = {
    "list_tables",
    "describe_table",
    "foreign_keys",
    "join_path",
    "sample_rows",
    "distinct_values",
    "run_query",
    "submit_sql",
}


@pytest.fixture
def tools(db) -> AgentToolbox:
    return AgentToolbox(db)


def test_describe_table_matches_the_published_trace_on_sqlite(sqlite_dsn, open_db):
    output = AgentToolbox(open_db(sqlite_dsn)).call("describe_table", {"table_name": "AlertLogs"})
    assert output.text == PUBLISHED_DESCRIBE
    assert output.tables == ("AlertLogs",) and output.error is None


@pytest.mark.postgres
def test_describe_table_renders_an_equivalent_create_table_on_postgres(postgres_dsn, open_db):
    output = AgentToolbox(open_db(postgres_dsn)).call("describe_table", {"table_name": "alertlogs"})
    assert output.text == (
        'CREATE TABLE "AlertLogs" (id INTEGER PRIMARY KEY NOT NULL, "alertId" INTEGER, "userId" INTEGER, '
        '"triggeredAt" TIMESTAMP WITHOUT TIME ZONE, FOREIGN KEY ("alertId") REFERENCES aler(id), '
        'FOREIGN KEY ("userId") REFERENCES users(id))'
    )


@pytest.mark.postgres
def test_describe_table_shows_composite_keys_schemas_and_comments_on_postgres(postgres_dsn, open_db):
    tools = AgentToolbox(open_db(postgres_dsn))
    assert tools.call("describe_table", {"table_name": "order_items"}).text == (
        "CREATE TABLE order_items (order_id INTEGER NOT NULL, product_id INTEGER NOT NULL, quantity INTEGER, "
        "PRIMARY KEY (order_id, product_id), FOREIGN KEY (order_id) REFERENCES orders(id), "
        "FOREIGN KEY (product_id) REFERENCES products(id))"
    )
    assert tools.call("describe_table", {"table_name": "sales.invoices"}).text == (
        "CREATE TABLE sales.invoices (id INTEGER PRIMARY KEY NOT NULL, order_id INTEGER, total NUMERIC(10,2), "
        "FOREIGN KEY (order_id) REFERENCES orders(id))"
    )
    customers = tools.call("describe_table", {"table_name": "customers"}).text
    assert customers.endswith(
        "; COMMENT ON TABLE \"customers\" IS 'People and companies who order'"
        '; COMMENT ON COLUMN "customers"."country_code" IS \'ISO 3166 alpha-2 code\''
    )


@pytest.mark.mysql
def test_describe_table_shows_the_servers_create_table_on_mysql(mysql_dsn, open_db):
    """SHOW CREATE TABLE on one line: backticks, the engine's types, named constraints and inline comments."""
    tools = AgentToolbox(open_db(mysql_dsn))
    alert_logs = tools.call("describe_table", {"table_name": "alertlogs"}).text
    assert alert_logs.startswith("CREATE TABLE `AlertLogs` ( `id` int")
    assert "\n" not in alert_logs and "  " not in alert_logs
    for clause in (
        "`triggeredAt` datetime DEFAULT NULL",
        "PRIMARY KEY (`id`)",
        "FOREIGN KEY (`alertId`) REFERENCES `aler` (`id`)",
        "FOREIGN KEY (`userId`) REFERENCES `users` (`id`)",
    ):
        assert clause in alert_logs
    customers = tools.call("describe_table", {"table_name": "CUSTOMERS"}).text
    assert "`country_code` varchar(8) DEFAULT NULL COMMENT 'ISO 3166 alpha-2 code'" in customers
    assert customers.endswith("COMMENT='People and companies who order'")
    assert "COMMENT ON" not in customers  # the comments are in the CREATE TABLE text already


def test_describe_table_shows_the_stored_create_table_on_duckdb(duckdb_dsn, open_db):
    tools = AgentToolbox(open_db(duckdb_dsn))
    assert tools.call("describe_table", {"table_name": "alertlogs"}).text == (
        "CREATE TABLE AlertLogs(id INTEGER PRIMARY KEY, alertId INTEGER, userId INTEGER, triggeredAt TIMESTAMP, "
        "FOREIGN KEY (alertId) REFERENCES aler(id), FOREIGN KEY (userId) REFERENCES users(id))"
    )
    assert tools.call("describe_table", {"table_name": "customers"}).text == (
        'CREATE TABLE customers(id INTEGER PRIMARY KEY, "name" VARCHAR NOT NULL, country_code VARCHAR, city VARCHAR, '
        "FOREIGN KEY (country_code) REFERENCES countries(code))"
        "; COMMENT ON TABLE \"customers\" IS 'People and companies who order'"
        '; COMMENT ON COLUMN "customers"."country_code" IS \'ISO 3166 alpha-2 code\''
    )


def test_describe_table_collapses_stored_whitespace(tmp_path, open_db):
    import sqlite3

    path = tmp_path / "spaced.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (\n    a INTEGER,\n\t b   TEXT\n)")
    text = AgentToolbox(open_db(str(path))).call("describe_table", {"table_name": "t"}).text
    assert text == "CREATE TABLE t ( a INTEGER, b TEXT )"


def test_run_query_matches_the_published_trace(tools, engine):
    sql = (
        "SELECT * FROM AlertLogs LIMIT 10"
        if engine == "sqlite"
        else f"SELECT * FROM {tools.db.quote('AlertLogs')} ORDER BY id LIMIT 10"
    )
    output = tools.call("run_query", {"sql": sql})
    assert output.text == PUBLISHED_SELECT
    assert output.tables == ("AlertLogs",)
    assert output.result is not None and output.result.row_count == 10


def test_run_query_count_matches_the_published_trace(tools, engine):
    q = tools.db.quote
    output = tools.call(
        "run_query", {"sql": f"SELECT COUNT(*) FROM {q('AlertLogs')} WHERE {q('userId')} = 5"}
    )
    assert output.text == f"{COUNT_HEADER[engine]}\n26"  # PostgreSQL and DuckDB name the column themselves


def test_run_query_prints_exactly_five_rows_without_the_more_line_when_there_are_five(tools):
    output = tools.call("run_query", {"sql": "SELECT id, name FROM users WHERE id <= 5 ORDER BY id"})
    assert output.text.splitlines() == ["id | name"] + [f"{i} | User {i}" for i in range(1, 6)]
    more = tools.call("run_query", {"sql": "SELECT id, name FROM users WHERE id <= 6 ORDER BY id"})
    assert more.text.splitlines()[-1] == "... (showing first 5 rows; more rows exist)"
    assert len(more.text.splitlines()) == 7


def test_run_query_empty_result_is_the_header_alone(tools):
    assert tools.call("run_query", {"sql": "SELECT id, name FROM users WHERE id < 0"}).text == "id | name"


def test_run_query_error_is_the_engine_message(tools, engine):
    output = tools.call("run_query", {"sql": "SELECT nme FROM users"})
    assert output.error == output.text
    assert output.text.startswith(UNKNOWN_COLUMN[engine])
    assert output.tables == ("users",)


def test_run_query_syntax_error_is_the_engine_message_with_position(tools, engine):
    output = tools.call("run_query", {"sql": "SELECT * FROM users WHERE"})
    assert output.text.startswith(INCOMPLETE[engine])
    if engine == "sqlite":
        assert output.text == "incomplete input"
    elif engine == "mysql":
        assert output.text.endswith("near '' at line 1")
    elif engine == "postgres":
        assert "LINE 1: SELECT * FROM users WHERE" in output.text and "^" in output.text


def test_list_tables_names_every_table_and_counts_them(tools, engine):
    names = list(COMMON_TABLES) + (["sales.invoices"] if engine == "postgres" else [])
    output = tools.call("list_tables", {})
    listed, _, count = output.text.rpartition(" (")
    assert sorted(listed.split(", ")) == sorted(names)
    assert count == f"{len(names)} tables)"
    assert output.tables == ()


def test_foreign_keys_lists_outgoing_then_incoming_references(tools):
    assert (
        tools.call("foreign_keys", {"table_name": "AlertLogs"}).text
        == "alertId -> aler(id)\nuserId -> users(id)"
    )
    assert tools.call("foreign_keys", {"table_name": "orders"}).text == (
        "customer_id -> customers(id)\nid <- order_items(order_id)" + _invoices_line(tools)
    )
    assert (
        tools.call("foreign_keys", {"table_name": "empty_table"}).text
        == "no foreign keys in or out of empty_table"
    )


def _invoices_line(tools: AgentToolbox) -> str:
    return "\nid <- sales.invoices(order_id)" if tools.db.dialect == "postgres" else ""


def test_join_path_follows_foreign_keys_in_either_direction(tools):
    output = tools.call("join_path", {"table_a": "countries", "table_b": "products"})
    assert output.text == "countries → customers → orders → order_items → products"
    assert output.tables == ("countries", "customers", "orders", "order_items", "products")
    assert tools.call("join_path", {"table_a": "aler", "table_b": "users"}).text == "aler → AlertLogs → users"
    assert tools.call("join_path", {"table_a": "users", "table_b": "users"}).text == "users"
    assert tools.call("join_path", {"table_a": "users", "table_b": "products"}).text == (
        "no foreign-key path between users and products"
    )


def test_sample_rows_prints_header_and_rows(tools):
    output = tools.call("sample_rows", {"table_name": "countries", "limit": 2})
    assert output.text == "code | name\nDE | Germany\nFR | France"
    assert output.tables == ("countries",)
    default = tools.call("sample_rows", {"table_name": "users"})
    assert len(default.text.splitlines()) == 1 + 5
    assert "7 | User 7 | None" in tools.call("sample_rows", {"table_name": "users", "limit": 10}).text


def test_distinct_values_one_per_line_most_frequent_first(tools):
    output = tools.call("distinct_values", {"table_name": "orders", "column_name": "status"})
    assert output.text == "shipped\ncancelled\npending\nreturned"
    limited = tools.call("distinct_values", {"table_name": "orders", "column_name": "status", "limit": 2})
    assert limited.text == "shipped\ncancelled\n... (showing first 2 distinct values; more exist)"
    nulls = tools.call(
        "distinct_values", {"table_name": "customers", "column_name": "country_code", "limit": 10}
    )
    assert set(nulls.text.splitlines()) == {"DE", "FR", "US", "JP", "None"}


def test_submit_sql_runs_the_query_like_run_query(tools):
    output = tools.call("submit_sql", {"sql": "SELECT name FROM countries WHERE code = 'JP'"})
    assert output.text == "name\nJapan"
    assert output.result is not None and output.result.rows == [("Japan",)]
    assert output.tables == ("countries",)


def test_every_tool_reports_the_tables_it_touched(tools):
    calls = {
        "list_tables": ({}, ()),
        "describe_table": ({"table_name": "USERS"}, ("users",)),
        "foreign_keys": ({"table_name": "orders"}, ("orders",)),
        "join_path": ({"table_a": "orders", "table_b": "customers"}, ("orders", "customers")),
        "sample_rows": ({"table_name": "aler", "limit": 1}, ("aler",)),
        "distinct_values": ({"table_name": "aler", "column_name": "title"}, ("aler",)),
        "run_query": (
            {
                "sql": "WITH c AS (SELECT * FROM customers) SELECT * FROM c JOIN orders o ON o.customer_id = c.id"
            },
            ("customers", "orders"),
        ),
        "submit_sql": ({"sql": "SELECT 1 FROM products p, countries"}, ("products", "countries")),
    }
    assert set(calls) == PROTOCOL_TOOLS
    for tool, (args, tables) in calls.items():
        output = tools.call(tool, args)
        assert output.error is None, output.text
        assert output.tables == tables, tool


def test_foreign_keys_caps_the_incoming_references_of_hub_tables(tmp_path, open_db):
    import sqlite3

    path = tmp_path / "hub.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE hub (id INTEGER PRIMARY KEY)")
        for i in range(19):
            conn.execute(
                f"CREATE TABLE spoke{i:02d} (id INTEGER PRIMARY KEY, hub_id INTEGER REFERENCES hub(id))"
            )
    lines = AgentToolbox(open_db(str(path))).call("foreign_keys", {"table_name": "hub"}).text.splitlines()
    # The README's documented cap: at most 15 incoming references, then how many more there are.
    assert lines == [f"id <- spoke{i:02d}(hub_id)" for i in range(15)] + ["... (4 more references into hub)"]


def test_distinct_values_falls_back_to_plain_distinct_when_ranking_is_too_slow(tools, monkeypatch):
    from dbtools.errors import QueryTimeoutError

    real_query = tools.db.query

    def slow_grouping(sql, **options):
        if "GROUP BY" in sql:
            raise QueryTimeoutError(2.0, 2.0)
        return real_query(sql, **options)

    monkeypatch.setattr(tools.db, "query", slow_grouping)
    output = tools.call("distinct_values", {"table_name": "orders", "column_name": "status", "limit": 10})
    assert output.error is None
    assert sorted(output.text.splitlines()) == ["cancelled", "pending", "returned", "shipped"]

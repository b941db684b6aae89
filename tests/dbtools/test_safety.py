"""The sqlglot allowlist on its own: what it accepts, what it refuses and the reasons it gives."""

from __future__ import annotations

import pytest

from dbtools.access.functions import allowed_functions
from dbtools.errors import UnparsableQueryError, UnsafeQueryError
from dbtools.safety import check_query, referenced_tables

DIALECTS = ["sqlite", "postgres"]
READ_ONLY = [
    "SELECT 1",
    "select * from users where name like '%; DROP TABLE users; --%'",
    "SELECT 'DELETE FROM users' AS text",
    "WITH recent AS (SELECT * FROM orders WHERE id > 10) SELECT count(*) FROM recent",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5) SELECT x FROM c",
    "SELECT a.id FROM users a JOIN orders b ON a.id = b.customer_id GROUP BY a.id HAVING count(*) > 1",
    "SELECT id, row_number() OVER (PARTITION BY status ORDER BY id) FROM orders",
    "SELECT 1 UNION SELECT 2 EXCEPT SELECT 3",
    "VALUES (1, 'a'), (2, 'b')",
    "(SELECT 1)",
    "SELECT CASE WHEN price > 10 THEN 'high' ELSE 'low' END FROM products",
    "SELECT substr(name, 1, 2), coalesce(email, 'none'), lower(name) FROM users",
    "SELECT * FROM users WHERE id IN (SELECT customer_id FROM orders) ORDER BY id LIMIT 5 OFFSET 1",
    "SELECT 1;",
    "/* leading comment */ SELECT 1 -- trailing",
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", READ_ONLY)
def test_read_only_queries_pass(sql, dialect):
    check_query(sql, dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT 1; SELECT 2", "only one statement per call is allowed; found 2"),
        ("COMMIT; DROP TABLE users", "only one statement per call is allowed; found 2"),
        ("DROP TABLE users", "this is a DROP statement"),
        ("DELETE FROM users", "this is a DELETE statement"),
        ("INSERT INTO users VALUES (1)", "this is an INSERT statement"),
        ("SET statement_timeout = 0", "this is a SET statement"),
        ("PRAGMA query_only = OFF", "this is a PRAGMA statement"),
        ("VACUUM", "this is a VACUUM statement"),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE inside a query is not allowed"),
        (
            "WITH u AS (UPDATE t SET a = 1 RETURNING a) SELECT * FROM u",
            "UPDATE inside a query is not allowed",
        ),
        ("SELECT * INTO copy FROM users", "SELECT ... INTO creates a table"),
        ("SELECT * FROM users FOR UPDATE", "locking clauses"),
        (
            "SELECT pg_sleep(10)",
            "function pg_sleep() is not allowed: queries may call only built-in functions",
        ),
        ("SELECT pg_catalog.PG_SLEEP(10)", "calls a function through a schema"),
        ("SELECT pg_read_file('/etc/passwd')", "function pg_read_file() is not allowed"),
        ("SELECT lo_export(1, '/tmp/x')", "function lo_export() is not allowed"),
        ("SELECT dblink_exec('x', 'DROP TABLE users')", "function dblink_exec() is not allowed"),
        (
            "SELECT set_config('a', 'b', false)",
            "function set_config() is not allowed",
        ),
        ("SELECT load_extension('evil')", "function load_extension() is not allowed"),
        ("SELECT 1 WHERE EXISTS (SELECT pg_advisory_lock(1))", "function pg_advisory_lock() is not allowed"),
        ("", "empty query"),
        ("-- only a comment", "empty query"),
    ],
)
def test_unsafe_queries_are_refused_with_a_reason(sql, reason, dialect):
    with pytest.raises(UnsafeQueryError) as refused:
        check_query(sql, dialect)
    assert reason in str(refused.value)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_nul_character_is_refused_before_an_engine_cuts_the_text_there(dialect):
    for sql in ("SELECT 1\x00 FROM users", "SELECT 'a\x00b'"):
        with pytest.raises(UnsafeQueryError, match="NUL character"):
            check_query(sql, dialect)


@pytest.mark.parametrize("sql", ["SELECT setseed(0.5)", "SELECT random() FROM (SELECT setseed(0)) AS s"])
def test_session_state_that_outlives_the_transaction_is_refused(sql):
    """A pooled connection would carry the seed into the next request: its random() becomes predictable."""
    with pytest.raises(UnsafeQueryError, match="setseed"):
        check_query(sql, "postgres")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT " + "(" * 3000 + "1" + ")" * 3000, "nested too deeply to check"),
        ("SELECT " + "(SELECT " * 500 + "1" + ")" * 500, "nested too deeply to check"),
        ("SELECT 1 WHERE 1 IN (" + ",".join(map(str, range(30_000))) + ")", "the limit is 100000"),
    ],
    ids=["nested parentheses", "nested subqueries", "long text"],
)
def test_text_too_deep_or_too_long_to_parse_is_refused_with_a_reason(sql, message, dialect):
    """Parsing runs before any timeout applies: it must fail fast, as a policy error, not a crash."""
    with pytest.raises(UnsafeQueryError, match=message):
        check_query(sql, dialect)
    assert referenced_tables(sql, dialect) == []


def test_unparsable_text_is_flagged_as_such():
    with pytest.raises(UnparsableQueryError):
        check_query("SELECT * FROM users WHERE", "sqlite")


@pytest.mark.parametrize(
    "name",
    [
        "pg_sleep",
        "pg_read_binary_file",
        "pg_ls_waldir",
        "lo_unlink",
        "dblink_connect",
        "pg_try_advisory_lock",
        "readfile",
        "writefile",
        "query_to_xml",
        "nextval",
        "table_to_xml",
        "gin_clean_pending_list",
        "brin_summarize_new_values",
        "pg_copy_physical_replication_slot",
        "pg_nextoid",
        "to_regclass",
        "pg_get_viewdef",
        "has_column_privilege",
        "load_file",
        "sleep",
        "load_extension",
        "read_csv",
        "duckdb_columns",
        "current_setting",
        "format_type",
    ],
)
def test_functions_that_reach_past_their_values_are_on_no_list(name):
    for dialect in ("sqlite", "postgres", "mysql", "duckdb"):
        assert name not in allowed_functions(dialect)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ts_stat('SELECT to_tsvector(pg_read_file(''/etc/hostname''))')",
        "SELECT * FROM pg_catalog.ts_stat('SELECT to_tsvector(lo_import(''/etc/hostname'')::text)')",
        "SELECT ts_rewrite('a & b'::tsquery, 'SELECT ''a''::tsquery, ''c''::tsquery FROM pg_sleep(5)')",
        "SELECT * FROM crosstab('SELECT pg_sleep(5)') AS t(a TEXT)",
        "SELECT pg_backup_start('x')",
        "SELECT pg_log_backend_memory_contexts(1)",
    ],
)
def test_functions_that_run_sql_text_or_control_the_server_are_refused(sql):
    """SQL text handed to a function would otherwise run past the function deny list."""
    with pytest.raises(UnsafeQueryError, match="is not allowed"):
        check_query(sql, "postgres")


@pytest.mark.parametrize(
    "name", ["count", "substr", "coalesce", "lower", "round", "max", "length", "replace"]
)
def test_ordinary_functions_are_allowed(name):
    for dialect in ("sqlite", "postgres", "mysql", "duckdb"):
        assert name in allowed_functions(dialect)


def test_referenced_tables_in_text_order_without_ctes():
    sql = (
        "WITH recent AS (SELECT * FROM orders) SELECT * FROM recent r JOIN sales.invoices i ON 1 = 1, "
        'generate_series(1, 3) g WHERE r.id IN (SELECT id FROM "Weird Table")'
    )
    assert referenced_tables(sql, "postgres") == ["orders", "sales.invoices", "Weird Table"]
    assert referenced_tables("SELECT * FROM", "sqlite") == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 WHERE; DROP TABLE users",
        "DO $$ a; b $$; DROP TABLE users",
        "SELECT * FROM users WHERE;;DELETE FROM users",
    ],
)
def test_unparsable_text_with_several_statements_is_refused_before_any_engine_sees_it(sql):
    with pytest.raises(UnsafeQueryError, match="only one statement per call") as refused:
        check_query(sql, "postgres")
    assert not isinstance(refused.value, UnparsableQueryError)


def test_unparsable_text_ending_in_a_semicolon_is_one_statement():
    with pytest.raises(UnparsableQueryError):
        check_query("SELECT * FROM users WHERE;", "sqlite")


def test_a_statement_that_passed_is_not_parsed_again_and_a_refused_one_always_is(monkeypatch):
    import dbtools.safety

    parsed: list[str] = []
    parse = dbtools.safety._check_statement
    monkeypatch.setattr(
        dbtools.safety, "_check_statement", lambda sql, d: (parsed.append(sql), parse(sql, d))
    )
    accepted = f"SELECT {id(parsed)} AS remembered"
    for _ in range(3):
        check_query(accepted, "sqlite")
    for _ in range(2):
        with pytest.raises(UnsafeQueryError):
            check_query("DELETE FROM users", "sqlite")
    check_query(accepted, "postgres")  # another dialect's verdict is its own
    assert parsed == [accepted, "DELETE FROM users", "DELETE FROM users", accepted]

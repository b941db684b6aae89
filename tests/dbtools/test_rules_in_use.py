"""Rules as a running server uses them: checked against the catalog when a source opens, never sharing a cache
with another rule set, plans shown by their shape, engine errors that name nothing hidden, and the hints of an
unknown name drawn from what is visible."""

from __future__ import annotations

import re
import sqlite3

import anyio
import pytest
from mcp import Client

from dbtools.access.guarded_database import NAMELESS_ERROR
from dbtools.access.rule_check import RulesError
from dbtools.access.rules import VisibilityRules
from dbtools.errors import ConnectionFailedError, QueryError
from dbtools.sources import ServerLimits, SourceSet, SourceSpec
from mcp_server.server import build_server
from mcp_server.settings import Settings
from mcp_server.tools.errors import name_hints
from tests.dbtools.redacted_pair import ENGINES, MARKER, redacted_pair, rules
from tests.server.test_cli import run_cli

LIMITS = ServerLimits(timeout=5.0, max_rows=100, pool_size=2, connect_timeout=5)
SERVER_ENGINES = {"postgres": "pg_server_dsn", "mysql": "mariadb_server_dsn"}
ENGINE_PARAMS = [
    pytest.param(e, marks=getattr(pytest.mark, e)) if e in SERVER_ENGINES else e for e in ENGINES
]


@pytest.fixture
def shop(tmp_path) -> str:
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, country_code TEXT)"
        )
        conn.executemany(
            "INSERT INTO customers VALUES (?, ?, ?, ?)",
            [(1, "Ada", f"{MARKER}-ada@x", "DE"), (2, "Grace", f"{MARKER}-grace@x", "US")],
        )
    return str(path)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (
            VisibilityRules(row_filters=(("customers", "contry_code = 'DE'"),), origin="sources.hr"),
            r"sources\.hr\.row_filters\.customers: the condition .* does not run on customers",
        ),
        (
            VisibilityRules(row_filters=(("custmers", "1 = 1"),), origin="sources.hr"),
            r"sources\.hr\.row_filters\.custmers: no table named 'custmers'; closest: customers",
        ),
        (
            VisibilityRules(hidden_columns=("customers.emial",), origin="identities.bob"),
            r"identities\.bob\.hidden_columns\[0\]: customers has no column 'emial'; closest: email",
        ),
        (
            VisibilityRules(hidden_tables=("customer",), origin="sources.hr"),
            r"sources\.hr\.hidden_tables\[0\]: no table named 'customer'",
        ),
    ],
)
def test_rules_that_do_not_fit_the_database_are_refused_naming_their_key(shop, wrong, message):
    source = SourceSet([SourceSpec("hr", shop, rules=wrong)], LIMITS).get("hr")
    with pytest.raises(RulesError, match=message):
        source.check_rules()
    # A client is told only that the source is not served: the details name what is hidden.
    with pytest.raises(ConnectionFailedError, match="its hidden-data rules do not fit") as refused:
        source.database()
    assert "email" not in str(refused.value) and "contry" not in str(refused.value)


def test_glob_patterns_may_match_nothing(shop):
    source = SourceSet(
        [SourceSpec("hr", shop, rules=VisibilityRules(hidden_columns=("*.password_hash",)))], LIMITS
    )
    assert [c.name for c in source.get("hr").database().table("customers").columns] == [
        "id",
        "name",
        "email",
        "country_code",
    ]


def test_the_server_exits_at_start_when_a_reachable_source_has_a_wrong_filter(shop, tmp_path):
    config = tmp_path / "team.toml"
    config.write_text(
        f'[sources.hr]\ndsn = "{shop}"\nrow_filters = {{ customers = "contry_code = \'DE\'" }}\n'
    )
    done = run_cli("--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "sources.hr.row_filters.customers" in done.stderr and "Traceback" not in done.stderr


def test_a_value_index_built_without_rules_is_never_searched_under_them(shop):
    """Two sources on one database, one with rules: the second's index is its own."""
    hidden = VisibilityRules(
        hidden_columns=("customers.email",), row_filters=(("customers", "country_code = 'DE'"),)
    )
    sources = SourceSet([SourceSpec("open", shop), SourceSpec("hr", shop, rules=hidden)], LIMITS)

    async def run():
        async with Client(build_server(Settings(), sources, named=True)) as client:
            opened = await client.call_tool("search_values", {"text": f"{MARKER}-grace@x", "source": "open"})
            ruled = await client.call_tool("search_values", {"text": f"{MARKER}-grace@x", "source": "hr"})
            ruled_name = await client.call_tool("search_values", {"text": "Grace", "source": "hr"})
            return opened, ruled, ruled_name

    try:
        opened, ruled, ruled_name = anyio.run(run)
    finally:
        sources.close()
    assert opened.structured_content["matches"], "the open source finds the value"
    assert ruled.structured_content["matches"] == [] and ruled_name.structured_content["matches"] == []


@pytest.fixture(params=ENGINE_PARAMS)
def ruled(request, tmp_path):
    engine = request.param
    server = request.getfixturevalue(SERVER_ENGINES[engine]) if engine in SERVER_ENGINES else None
    with redacted_pair(engine, tmp_path, server) as pair:
        sources = SourceSet([SourceSpec("main", pair.original, rules=rules(engine))], LIMITS)
        yield engine, sources.get(None).database()
        sources.close()


def test_plans_show_their_shape_without_estimates_conditions_or_filters(ruled):
    engine, db = ruled
    q = '"' if engine != "mysql" else "`"
    plan = db.explain(
        f"SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.total > 15 AND {q}c{q}.name <> 'x'"
    )
    assert plan.strip()
    for secret in ("EU", "region", "15", "cost", "rows=", "Filter", "margin", "email"):
        assert secret not in plan, (secret, plan)
    assert not re.search(r"\d{2,}", plan), plan


def test_a_plan_does_not_tell_a_filtered_out_value(ruled):
    """The one filtered-out invoice totals 777; the kept ones 4 and 8: no plan may tell 776 from 777."""
    engine, db = ruled
    q = '"' if engine != "mysql" else "`"
    plans = [
        db.explain(f"SELECT * FROM {q}Invoice{q} WHERE {q}Total{q} > {bound}") for bound in (9, 776, 777, 800)
    ]
    assert len(set(plans)) == 1, plans


def test_engine_errors_that_name_a_hidden_object_are_replaced(ruled):
    engine, db = ruled
    with pytest.raises(QueryError) as failed, db._errors_about("SELECT 1 / 0"):
        raise QueryError(
            'column "salary" does not exist\nHINT: Perhaps you meant to reference the column "e.salary".'
        )
    assert str(failed.value) == NAMELESS_ERROR
    with pytest.raises(QueryError) as kept, db._errors_about("SELECT salary FROM employees"):
        raise QueryError('column "salary" does not exist')
    assert str(kept.value) == 'column "salary" does not exist'


def test_engine_errors_do_not_quote_the_statement_that_ran(ruled):
    engine, db = ruled
    with pytest.raises(QueryError) as failed:
        db.query("SELECT id FROM orders WHERE nosuchcolumn = 1")
    assert (
        "EU" not in str(failed.value)
        and "OFFSET" not in str(failed.value)
        and "LIMIT" not in str(failed.value)
    )


def test_unknown_columns_get_hints_from_the_visible_columns_only(ruled):
    _, db = ruled
    with pytest.raises(QueryError) as failed, name_hints(db, "SELECT emal FROM customers"):
        db.query("SELECT emal FROM customers")
    assert "email" not in str(failed.value)
    with pytest.raises(QueryError) as hinted, name_hints(db, "SELECT nme FROM customers"):
        db.query("SELECT nme FROM customers")
    assert "closest columns: name (customers" in str(hinted.value)


@pytest.mark.mysql
def test_regexp_under_rules_runs_on_mariadb(mariadb_server_dsn, tmp_path):
    """sqlglot writes MySQL's REGEXP as REGEXP_LIKE(), which MariaDB lacks: rewritten queries keep the operator."""
    with redacted_pair("mysql", tmp_path, mariadb_server_dsn) as pair:
        sources = SourceSet([SourceSpec("main", pair.original, rules=rules("mysql"))], LIMITS)
        try:
            result = sources.get(None).database().query("SELECT name FROM customers WHERE name REGEXP '^A'")
        finally:
            sources.close()
    assert result.rows == [("Ada",)]

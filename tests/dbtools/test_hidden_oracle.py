"""The differential oracle of hidden data (the technique SQLancer finds logic bugs with): each query runs through the
rules on the original database and directly on its physically redacted copy, on every engine (PostgreSQL as a
superuser, MariaDB as root: the database itself protects nothing). It must be refused by the checks, or answer
exactly as the copy does: the same column names and rows, or an engine error on both. The copy holds no hidden
value, so a leak or an oracle on one shows up as a difference."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from dbtools.access.rules import VisibilityRules
from dbtools.errors import DatabaseToolError, QueryError, UnknownObjectError, UnsafeQueryError
from dbtools.sources import ServerLimits, SourceSet, SourceSpec
from tests.dbtools.hidden_queries import ATTACKS, LEGITIMATE, for_engine, queries
from tests.dbtools.redacted_pair import MARKER, redacted_pair, rules

ENGINES = [
    "sqlite",
    "duckdb",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]
LIMITS = ServerLimits(timeout=5.0, max_rows=1000, pool_size=2, connect_timeout=5)
REFUSED = (UnsafeQueryError, UnknownObjectError)
# What only the rewritten statement holds: the filters' text and the fresh names.
REWRITTEN = ("= 'EU'", "sqlscout_", "OFFSET 0")
GENERATED_FAST = 150
GENERATED_FULL = 2500


class Oracle:
    """One engine's pair: the original served under the rules, and the redacted copy."""

    def __init__(self, pair, identity: bool = False) -> None:
        """`identity`: the rules split between the source's and a calling identity's, which apply on top."""
        self.pair = pair
        every = rules(pair.engine)
        if identity:
            source_rules = VisibilityRules(
                hidden_tables=every.hidden_tables, row_filters=every.row_filters[:1]
            )
            extra = VisibilityRules(hidden_columns=every.hidden_columns, row_filters=every.row_filters[1:])
        else:
            source_rules, extra = every, None
        self.sources = SourceSet([SourceSpec("main", pair.original, rules=source_rules)], LIMITS)
        self.db = self.sources.get(None).database(extra)
        self.verdicts: dict[str, int] = {"refused": 0, "same rows": 0, "errors on both": 0}

    def check(self, sql: str) -> str:
        """The verdict on `sql`; fails the test on a difference."""
        try:
            result = self.db.query(sql, max_rows=1000)
            ours: tuple | str = (result.columns, result.rows)
            # A column named by the rewritten text would carry the filters.
            assert not any(mark in name for name in result.columns for mark in REWRITTEN), (
                sql,
                result.columns,
            )
        except REFUSED:
            self.verdicts["refused"] += 1
            return "refused"
        except QueryError as error:
            assert MARKER not in str(error), (sql, str(error))
            assert not any(mark in str(error) for mark in REWRITTEN), (sql, str(error))
            ours = "error"
        try:
            theirs: tuple | str = self.pair.run_redacted(sql)
        except Exception:  # noqa: BLE001 - any engine error
            theirs = "error"
        if ours == "error" or theirs == "error":
            assert ours == theirs, f"{sql}\nthrough the rules: {ours}\nredacted copy: {theirs}"
            self.verdicts["errors on both"] += 1
            return "errors on both"
        assert ours[0] == theirs[0], f"{sql}: columns {ours[0]} against {theirs[0]}"
        # As multisets: the order of rows an ORDER BY leaves tied is the engine's choice on each database.
        assert _rows(ours[1]) == _rows(theirs[1]), f"{sql}: {ours[1]} against {theirs[1]}"
        self.verdicts["same rows"] += 1
        return "same rows"


def _value(value):
    """A whole-row value as PostgreSQL writes it: the engine reads records as tuples, the bare driver as text."""
    return "(" + ",".join(str(v) for v in value) + ")" if isinstance(value, tuple) else value


def _rows(rows: list[tuple]) -> list:
    return sorted(tuple(repr(_value(v)) for v in row) for row in rows)


@pytest.fixture(scope="module", params=ENGINES)
def oracle(request, tmp_path_factory):
    engine = request.param
    server = {"postgres": "pg_server_dsn", "mysql": "mariadb_server_dsn"}.get(engine)
    with redacted_pair(
        engine,
        tmp_path_factory.mktemp(f"oracle-{engine}"),
        request.getfixturevalue(server) if server else None,
    ) as pair:
        checked = Oracle(pair)
        yield checked
        checked.sources.close()


def test_every_known_attack_is_refused_or_answers_as_the_redacted_copy(oracle):
    verdicts = {sql: oracle.check(for_engine(sql, oracle.pair.engine)) for sql in ATTACKS}
    # The families the checks must refuse outright rather than answer.
    for sql in (
        "SELECT * FROM secrets",
        "SELECT table_to_xml('secrets', true, false, '')",
        "SELECT * FROM email_view",
    ):
        if sql in verdicts:
            assert verdicts[sql] == "refused", sql
    assert oracle.verdicts["same rows"] >= 15, oracle.verdicts


def test_an_identitys_rules_on_top_of_the_sources_hold_as_one_rule_set(oracle):
    split = Oracle(oracle.pair, identity=True)
    try:
        for sql in ATTACKS:
            split.check(for_engine(sql, oracle.pair.engine))
        for sql in LEGITIMATE:
            assert split.check(for_engine(sql, oracle.pair.engine)) == "same rows", sql
    finally:
        split.sources.close()


def test_ordinary_queries_are_never_refused_and_answer_as_the_redacted_copy(oracle):
    for sql in LEGITIMATE:
        assert oracle.check(for_engine(sql, oracle.pair.engine)) == "same rows", sql


def generated(count: int):
    def decorate(test):
        return settings(
            max_examples=count,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[
                HealthCheck.function_scoped_fixture,
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
            ],
        )(test)

    return decorate


def test_generated_queries_are_refused_or_answer_as_the_redacted_copy(oracle):
    run_generated(oracle, GENERATED_FAST)


@pytest.mark.slow
def test_thousands_of_generated_queries_are_refused_or_answer_as_the_redacted_copy(oracle):
    run_generated(oracle, GENERATED_FULL)


def run_generated(oracle: Oracle, count: int) -> None:
    before = dict(oracle.verdicts)

    @generated(count)
    @given(sql=queries(oracle.pair.engine))
    def check(sql: str) -> None:
        oracle.check(sql)

    check()
    answered = oracle.verdicts["same rows"] - before["same rows"]
    assert answered >= count // 20, oracle.verdicts  # the grammar reaches answers, not only refusals
    print(f"{oracle.pair.engine}: {count} generated queries: {oracle.verdicts}")


def test_the_oracle_sees_a_leak(oracle):
    """The oracle itself: the original read without the rules differs from the redacted copy."""
    from dbtools.engines import open_database

    with open_database(oracle.pair.original, timeout_s=5.0) as plain:
        result = plain.query("SELECT count(*) FROM orders")
    assert result.rows != [tuple(row) for row in oracle.pair.run_redacted("SELECT count(*) FROM orders")[1]]
    with pytest.raises(DatabaseToolError):
        oracle.db.query("SELECT token FROM secrets")

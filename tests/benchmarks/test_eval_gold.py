"""Gold tables and literals are read from the gold SQL with sqlglot."""

from benchmarks.eval.gold import gold_literals, gold_tables, literal_seen, table_key


def test_gold_tables_exclude_ctes_and_normalise_names():
    sql = 'WITH recent AS (SELECT * FROM "Orders") SELECT * FROM recent JOIN sales.Customers c ON 1'
    assert gold_tables(sql) == {"orders", "customers"}


def test_gold_tables_of_unparseable_sql_is_empty():
    assert gold_tables("SELEC nothing FROM") == set()


def test_literals_are_those_compared_with_data():
    sql = (
        "SELECT 'label', COUNT(*) FROM t WHERE strftime('%Y', d) = '2020' AND city IN ('Lisbon', 'Porto') "
        "AND name LIKE '%ana%' AND (kind = 'x')"
    )
    assert gold_literals(sql) == ["2020", "Lisbon", "Porto", "%ana%", "x"]


def test_literal_seen_ignores_case_and_like_wildcards():
    outputs = "name | city\nMariana | LISBON"
    assert literal_seen("Lisbon", outputs)
    assert literal_seen("%ana%", outputs)
    assert not literal_seen("Porto", outputs)
    assert not literal_seen("%", outputs)


def test_table_key():
    assert table_key('"Sales"."Orders"') == "orders"
    assert table_key("orders") == "orders"

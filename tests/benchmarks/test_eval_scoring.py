"""Execution accuracy follows BIRD: set equality of rows, order and duplicates ignored, column order kept."""

import datetime as dt
from decimal import Decimal

from benchmarks.eval.scoring import normalise_value, results_match


def test_row_order_does_not_count():
    assert results_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")])


def test_duplicates_do_not_count():
    assert results_match([(1,), (1,), (2,)], [(2,), (1,)])


def test_different_rows_fail():
    assert not results_match([(1, "a")], [(1, "b")])
    assert not results_match([(1,)], [(1,), (2,)])


def test_column_order_counts():
    assert not results_match([(1, "a")], [("a", 1)])


def test_empty_results_match_only_each_other():
    assert results_match([], [])
    assert not results_match([], [(None,)])


def test_int_float_decimal_and_bool_compare_by_value():
    assert results_match([(1, 2.5)], [(1.0, Decimal("2.5"))])
    assert results_match([(True,)], [(1,)])
    assert not results_match([(1.5,)], [(1,)])
    assert normalise_value(Decimal("3")) == 3 and isinstance(normalise_value(Decimal("3")), int)


def test_dates_compare_with_sqlite_text():
    assert results_match([(dt.date(2024, 3, 1),)], [("2024-03-01",)])
    assert results_match([(dt.datetime(2024, 3, 1, 12, 30),)], [("2024-03-01 12:30:00",)])


def test_text_case_counts():
    assert not results_match([("Lisbon",)], [("lisbon",)])


def test_unhashable_cells_are_compared_by_content():
    assert results_match([([1, 2],)], [((1, 2),)])
    assert results_match([(memoryview(b"ab"),)], [(b"ab",)])

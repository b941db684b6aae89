"""The n-gram drafter: the longest matching n-gram's latest earlier occurrence, the row's own sequence before the
recent generations of other sequences, nothing when nothing matches, and a bounded recent index."""

from __future__ import annotations

from model.drafting import NgramDrafter, NgramIndex, RecentSequences


def test_longest_ngram_and_its_latest_occurrence_win():
    # "1 2 3" was followed by 4 at first, then by 9; "3" alone was last followed by 7.
    text = NgramIndex([1, 2, 3, 4, 5, 1, 2, 3, 9, 3, 7, 2, 3])
    assert NgramDrafter().draft(text, 3) == [9, 3, 7]
    assert NgramDrafter().draft(NgramIndex([5, 3, 7, 8, 3]), 4) == [7, 8, 3]


def test_the_current_suffix_is_not_its_own_match():
    assert NgramDrafter().draft(NgramIndex([1, 2, 3]), 4) == []
    text = NgramIndex([1, 2])
    text.extend([1])
    assert NgramDrafter().draft(text, 4) == [2, 1]  # a draft stops where the sequence does


def test_the_limit_and_no_match():
    drafter = NgramDrafter()
    assert drafter.draft(NgramIndex([4, 5, 6, 7, 4]), 2) == [5, 6]
    assert drafter.draft(NgramIndex([4, 5, 6, 7, 4]), 0) == []
    assert drafter.draft(NgramIndex(), 4) == []


def test_recent_generations_serve_when_the_own_sequence_has_no_match():
    drafter = NgramDrafter()
    drafter.finished([40, 41, 42, 43], before=[8, 9])
    drafter.finished([50, 51], before=[7])
    # A longer match in the recent text beats a shorter one in the row's own sequence.
    assert drafter.draft(NgramIndex([1, 2, 8, 9]), 3) == [40, 41, 42]
    # The row's own sequence wins at the same length.
    assert drafter.draft(NgramIndex([9, 99, 9]), 3) == [99, 9]
    # No n-gram spans two generations: "51 8" never occurred.
    assert drafter.draft(NgramIndex([51]), 3) == []
    assert drafter.draft(NgramIndex([7]), 5) == [50, 51]


def test_recent_generations_are_bounded():
    recent = RecentSequences(capacity=100)
    for start in range(0, 1000, 10):
        recent.add(list(range(start, start + 10)))
        assert len(recent._index) <= 100
    assert recent.draft((995,), 3) == [996, 997, 998]
    assert recent.draft((5,), 3) == []  # long dropped

"""The n-gram drafter: the longest matching n-gram's latest earlier occurrence, the row's own sequence before the
recent generations of other sequences, fewer tokens after a short match, nothing when nothing matches, and a
bounded recent index."""

from __future__ import annotations

from model.drafting import DRAFT_TOKENS_BY_MATCH, NgramDrafter, NgramIndex, RecentSequences


def test_longest_ngram_and_its_latest_occurrence_win():
    # "1 2 3 4" was followed by 5 at first, then by 9; "4" alone was last followed by 7.
    text = NgramIndex([1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 9, 8, 7, 4, 7, 1, 2, 3, 4])
    assert NgramDrafter().draft(text, 5).tokens == [9, 8, 7, 4, 7]
    assert NgramDrafter().draft(text, 2).tokens == [9, 8]


def test_a_draft_names_the_length_of_its_match():
    assert NgramDrafter().draft(NgramIndex([1, 2, 3, 4, 5, 1, 2, 3, 4]), 8).kind == 4
    assert NgramDrafter().draft(NgramIndex([7, 2, 3, 9, 2, 3]), 8).kind == 2


def test_a_short_match_proposes_fewer_tokens():
    # Only "3" recurs: a one-token match proposes DRAFT_TOKENS_BY_MATCH[0] tokens.
    text = NgramIndex([5, 3, 7, 8, 9, 6, 3])
    assert NgramDrafter().draft(text, 8).tokens == [7, 8, 9, 6][: DRAFT_TOKENS_BY_MATCH[0]]
    # "6 3" recurs: two tokens matched propose DRAFT_TOKENS_BY_MATCH[1].
    text = NgramIndex([6, 3, 7, 8, 9, 5, 6, 3])
    assert NgramDrafter().draft(text, 8).tokens == [7, 8, 9][: DRAFT_TOKENS_BY_MATCH[1]]


def test_the_current_suffix_is_not_its_own_match():
    assert NgramDrafter().draft(NgramIndex([1, 2, 3]), 4).tokens == []
    text = NgramIndex([1, 2, 3, 4])
    text.extend([1, 2, 3, 4])
    assert NgramDrafter().draft(text, 8).tokens == [1, 2, 3, 4]  # a draft stops where the sequence does


def test_the_limit_and_no_match():
    drafter = NgramDrafter()
    text = NgramIndex([4, 5, 6, 7, 8, 9, 4, 5, 6, 7])
    assert drafter.draft(text, 1).tokens == [8]
    assert drafter.draft(text, 0).tokens == []
    assert drafter.draft(NgramIndex(), 4).tokens == []


def test_recent_generations_serve_when_the_own_sequence_has_no_match():
    drafter = NgramDrafter()
    drafter.finished([40, 41, 42, 43, 44], before=[6, 7, 8, 9])
    drafter.finished([50, 51], before=[5])
    # A longer match in the recent text beats a shorter one in the row's own sequence.
    assert drafter.draft(NgramIndex([9, 1, 6, 7, 8, 9]), 3).tokens == [40, 41, 42]
    # The row's own sequence wins at the same length.
    assert drafter.draft(NgramIndex([9, 99, 9]), 3).tokens == [99]
    # No n-gram spans two generations: "44 5" never occurred.
    assert drafter.draft(NgramIndex([44, 5]), 3).tokens == [50]
    assert drafter.draft(NgramIndex([51]), 3).tokens == []


def test_recent_generations_are_bounded():
    recent = RecentSequences(capacity=100)
    for start in range(0, 1000, 10):
        recent.add(list(range(start, start + 10)))
        assert len(recent._index) <= 100
    assert recent.draft((995,), 3) == [996, 997, 998]
    assert recent.draft((5,), 3) == []  # long dropped

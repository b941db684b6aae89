"""The draft budget checks as many drafted tokens as pay on the measured costs and acceptance: none before a plain
step is measured, all when passes are cheap and drafts right, none when passes are dear or drafts wrong (with a
retry every EXPLORE_EVERY declines), and kinds of draft kept apart."""

from __future__ import annotations

import pytest

from model.draft_budget import EXPLORE_EVERY, DraftBudget


def _budget(step: float, passes: dict[int, float], max_tokens: int = 8) -> DraftBudget:
    budget = DraftBudget(max_tokens)
    budget.record_pass(1, 1, step)
    for width, seconds in passes.items():
        budget.record_pass(1, width, seconds)
    return budget


def _accept(budget: DraftBudget, kind: int, drafted: int, accepted: int, times: int = 200) -> None:
    for _ in range(times):
        budget.record_draft(kind, drafted, accepted)


def test_nothing_is_drafted_before_a_plain_step_is_measured():
    budget = DraftBudget(8)
    assert budget.length(1, 4, 8) == 0
    budget.record_pass(1, 1, 0.1)
    assert budget.length(1, 4, 8) > 0  # unmeasured passes are assumed cheap: tried
    assert budget.length(2, 4, 8) == 0  # another batch size has costs of its own


def test_cheap_passes_and_right_drafts_check_everything():
    budget = _budget(0.100, {9: 0.110})
    _accept(budget, 4, 8, 8)
    assert budget.length(1, 4, 8) == 8
    assert budget.length(1, 4, 3) == 3
    assert budget.cost(1, 5) == pytest.approx(0.105)  # between the measured widths


def test_dear_passes_or_wrong_drafts_check_nothing_but_retry_now_and_then():
    budget = _budget(0.100, {2: 0.190, 9: 0.900})
    _accept(budget, 1, 1, 0)
    _accept(budget, 4, 8, 8)
    lengths = [budget.length(1, 1, 4) for _ in range(2 * EXPLORE_EVERY)]
    assert lengths.count(0) == 2 * EXPLORE_EVERY - 2 and lengths[EXPLORE_EVERY - 1] == 4
    # A kind that is right every time still pays at one token whose pass costs less than two steps.
    assert budget.length(1, 4, 8) == 1


def test_acceptance_moves_with_the_text():
    budget = _budget(0.100, {5: 0.130})
    _accept(budget, 2, 4, 4)
    assert budget.acceptance(2) > 0.95
    _accept(budget, 2, 4, 0, times=400)
    assert budget.acceptance(2) < 0.1

"""The question gate: at most `limit` holders, waiters let in strictly in order of arrival, a cancelled waiter
leaves the line without ever holding a place."""

from __future__ import annotations

import threading
import time

import pytest

from mcp_server.question_gate import QuestionGate
from model.serving.cancel import CancelEvent, Cancelled

GUARD_S = 30.0


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {GUARD_S:g} s"
        time.sleep(0.005)


def test_waiters_are_let_in_in_order_of_arrival_and_never_more_than_the_limit():
    gate = QuestionGate(2)
    order: list[int] = []
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def question(number: int) -> None:
        nonlocal most
        with gate.turn(CancelEvent()):
            with lock:
                order.append(number)
                most = max(most, gate.running)
            release.wait(GUARD_S)

    threads = []
    for number in range(12):
        thread = threading.Thread(target=question, args=(number,))
        thread.start()
        threads.append(thread)
        # The next question arrives only once this one holds a place or stands in line.
        wait_until(lambda n=number: gate.running + gate.waiting == n + 1, f"question {number} at the gate")
    release.set()
    for thread in threads:
        thread.join(GUARD_S)
    assert sorted(order[:2]) == [0, 1] and order[2:] == list(range(2, 12))
    assert most == 2 and gate.running == gate.waiting == 0


def test_a_cancelled_waiter_leaves_the_line_and_the_next_one_moves_up():
    gate = QuestionGate(1)
    release = threading.Event()
    cancel_second = CancelEvent()
    outcome: dict[str, object] = {}

    def hold_first() -> None:
        with gate.turn(CancelEvent()):
            release.wait(GUARD_S)

    def second() -> None:
        try:
            with gate.turn(cancel_second):
                outcome["second"] = "ran"
        except Cancelled as error:
            outcome["second"] = error

    def third() -> None:
        with gate.turn(CancelEvent()):
            outcome["third"] = "ran"

    first_thread = threading.Thread(target=hold_first)
    first_thread.start()
    wait_until(lambda: gate.running == 1, "first question running")
    second_thread = threading.Thread(target=second)
    second_thread.start()
    wait_until(lambda: gate.waiting == 1, "second question waiting")
    third_thread = threading.Thread(target=third)
    third_thread.start()
    wait_until(lambda: gate.waiting == 2, "third question waiting")
    cancel_second.set()
    second_thread.join(GUARD_S)
    assert isinstance(outcome["second"], Cancelled)
    assert gate.waiting == 1 and "third" not in outcome
    release.set()
    for thread in (first_thread, third_thread):
        thread.join(GUARD_S)
    assert outcome["third"] == "ran" and gate.running == gate.waiting == 0


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        QuestionGate(0)

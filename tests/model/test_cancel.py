"""The one cancel mechanism: setting the event wakes a wait on a condition at once (nobody notifies the
condition), a wait that is ready wins over a cancel, and a callback runs only while its block does."""

from __future__ import annotations

import threading
import time

import pytest

from model.serving.cancel import CancelEvent, Cancelled, wait_until

GUARD_S = 30.0


def test_setting_the_event_ends_a_wait_that_nothing_else_would_end():
    changed = threading.Condition()
    cancel = CancelEvent()
    outcome: dict[str, object] = {}
    waiting = threading.Event()

    def wait() -> None:
        with changed:
            waiting.set()
            try:
                wait_until(changed, lambda: False, cancel, "cancelled while waiting")
            except Cancelled as error:
                outcome["error"] = error
                outcome["at"] = time.monotonic()

    thread = threading.Thread(target=wait)
    thread.start()
    assert waiting.wait(GUARD_S)
    with changed:  # the waiter is inside changed.wait() once it released the lock
        pass
    set_at = time.monotonic()
    cancel.set()
    thread.join(GUARD_S)
    assert str(outcome["error"]) == "cancelled while waiting"
    assert outcome["at"] - set_at < 1.0  # woken by the setting, not by a timeout


def test_a_ready_wait_wins_over_a_cancel_and_an_event_set_before_the_wait_cancels_it():
    changed = threading.Condition()
    cancel = CancelEvent()
    cancel.set()
    with changed:
        wait_until(changed, lambda: True, cancel, "unused")
        with pytest.raises(Cancelled, match="too late"):
            wait_until(changed, lambda: False, cancel, "too late")


def test_a_callback_runs_in_the_setting_thread_only_while_its_block_runs():
    cancel = CancelEvent()
    calls: list[str] = []
    with cancel.when_set(lambda: calls.append(threading.current_thread().name)):
        setter = threading.Thread(target=cancel.set, name="setter")
        setter.start()
        setter.join(GUARD_S)
    assert calls == ["setter"]
    cancel.clear()
    cancel.set()
    assert calls == ["setter"]

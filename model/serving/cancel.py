"""Cancelling what a caller waits for: the event it sets, the one error a cancel raises, and a wait on a condition
that setting the event ends at once, without polling. Free of torch: the server's waits use it too."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Cancelled(Exception):
    """The caller cancelled: its wait for a turn, for the model or for a reply stopped, or its generation did."""


class CancelEvent(threading.Event):
    """A threading.Event whose set() also runs the callbacks registered with when_set(), in the setting thread,
    so that a wait or a request in flight stops the moment the event is set."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._callbacks_lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    @contextmanager
    def when_set(self, callback: Callable[[], None]) -> Iterator[None]:
        """Run `callback` if the event is set while the block runs. An event set already runs nothing: check
        is_set() inside the block, after this registered the callback, so that no setting is missed."""
        with self._callbacks_lock:
            self._callbacks.append(callback)
        try:
            yield
        finally:
            with self._callbacks_lock:
                self._callbacks.remove(callback)


def wait_until(
    changed: threading.Condition, ready: Callable[[], bool], cancel: CancelEvent | None, cancelled: str
) -> None:
    """Called holding `changed`: wait until ready() (checked whenever `changed` is notified) or until `cancel`
    is set, then raise Cancelled(cancelled). ready() wins when both hold."""
    if cancel is None:
        changed.wait_for(ready)
        return

    def wake() -> None:
        with changed:
            changed.notify_all()

    with cancel.when_set(wake):
        while not ready():
            if cancel.is_set():
                raise Cancelled(cancelled)
            changed.wait()

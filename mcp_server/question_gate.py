"""At most N questions run at once; the others wait their turn in order of arrival, each until its cancel."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from model.serving.cancel import CancelEvent, wait_until


class QuestionGate:
    """A first-come, first-served semaphore whose waiters give up when their cancel event is set."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._running = 0
        self._queue: deque[object] = deque()
        self._changed = threading.Condition()

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @contextmanager
    def turn(self, cancel: CancelEvent) -> Iterator[None]:
        """Wait until every earlier arrival has started and a place is free, then hold it for the block;
        Cancelled if `cancel` is set first."""
        ticket = object()
        with self._changed:
            self._queue.append(ticket)
            try:
                wait_until(
                    self._changed,
                    lambda: self._queue[0] is ticket and self._running < self.limit,
                    cancel,
                    "cancelled while waiting for its turn on the model",
                )
            except BaseException:
                self._queue.remove(ticket)
                self._changed.notify_all()  # the next in line may now be at the head
                raise
            self._queue.popleft()
            self._running += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

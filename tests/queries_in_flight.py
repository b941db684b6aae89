"""Counts how many queries a database is running at once, to prove that calls overlap rather than take turns."""

from __future__ import annotations

import threading

import pytest

from dbtools.engines import Database


class QueriesInFlight:
    """Instruments one database: a query counts as in flight from its first row until its statement ends.

    On its first row each query waits until `wanted` queries are in flight together, so overlap is certain
    whenever the code lets calls run side by side. Calls that run one after another never get there: the
    first wait gives up after `give_up_s` (no later query waits) and `most` stays at 1.
    """

    def __init__(self, db: Database, monkeypatch: pytest.MonkeyPatch, wanted: int, give_up_s: float = 3.0):
        self.wanted = wanted
        self.give_up_s = give_up_s
        self.most = 0
        self._now = 0
        self._gave_up = False
        self._changed = threading.Condition()
        run_capped = db._run_capped

        def counted(sql, caps, timeout_s):
            keep, keep_rows = caps.add, caps.add_rows
            entered = False

            def first_row_waits(row):
                nonlocal entered
                if not entered:
                    entered = True
                    self._enter()
                return keep(row)

            def first_rows_wait(rows):
                nonlocal entered
                if not entered and len(rows):
                    entered = True
                    self._enter()
                return keep_rows(rows)

            caps.add = first_row_waits
            caps.add_rows = first_rows_wait
            try:
                return run_capped(sql, caps, timeout_s)
            finally:
                if entered:
                    self._leave()

        monkeypatch.setattr(db, "_run_capped", counted)

    def _enter(self) -> None:
        with self._changed:
            self._now += 1
            self.most = max(self.most, self._now)
            self._changed.notify_all()
            if not self._gave_up and not self._changed.wait_for(
                lambda: self.most >= self.wanted, timeout=self.give_up_s
            ):
                self._gave_up = True

    def _leave(self) -> None:
        with self._changed:
            self._now -= 1

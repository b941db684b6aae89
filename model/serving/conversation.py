"""One caller's rows in the shared batch: several continuations of one prompt, kept across turns so that each
turn prefills only the tokens appended since the last one."""

from __future__ import annotations

from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent, Cancelled
from model.serving.row_pool import Lease
from model.serving.scheduler import BatchScheduler


class Conversation:
    """`rows` continuations of `prompt_ids` that the scheduler decodes with every other caller's rows: the prompt
    is filled in once and copied into each row when the conversation is admitted, at its first generate();
    tokens appended between generations are prefilled when the next one is asked for, together with it."""

    def __init__(self, scheduler: BatchScheduler, prompt_ids: list[int], rows: int, max_tokens: int) -> None:
        self._scheduler = scheduler
        self._prompt_ids = list(prompt_ids)
        self.rows = rows
        # A prompt longer than max_tokens still fits its rows; the caller then stops before generating.
        self._max_tokens = max(max_tokens, len(self._prompt_ids))
        self._lease: Lease | None = None
        self._prompt_processed = 0
        self._unsent: list[list[int]] = [[] for _ in range(rows)]

    def append(self, tokens: dict[int, list[int]]) -> None:
        """Add tokens to rows (by row index), prefilled with the next generate()."""
        for row, ids in tokens.items():
            self._unsent[row] += ids

    def generate(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        cancel: CancelEvent | None = None,
    ) -> list[list[int]]:
        """Up to max_new_tokens for each of `rows`, a row ending after a stop id; one token list per row.
        Waits for rows in order of arrival at the first call; Cancelled once `cancel` is set."""
        if cancel is not None and cancel.is_set():
            raise Cancelled("the question was cancelled")
        if self._lease is None:
            self._lease, self._prompt_processed = self._scheduler.admit(
                self._prompt_ids, self.rows, self._max_tokens, cancel
            )
        appends = {row: ids for row, ids in enumerate(self._unsent) if ids}
        self._unsent = [[] for _ in range(self.rows)]
        return self._scheduler.generate(
            self._lease, appends, rows, max_new_tokens, sampling, stop_ids, cancel
        )

    def length(self, row: int) -> int:
        """Tokens in the row, appended ones not yet prefilled included."""
        held = self._lease.lengths[row] if self._lease is not None else len(self._prompt_ids)
        return held + len(self._unsent[row])

    @property
    def processed_tokens(self) -> int:
        """Tokens run through the model for this conversation: its prompt's part and its rows'."""
        return self._prompt_processed + (self._lease.processed if self._lease is not None else 0)

    def close(self) -> None:
        """Give the rows back at once, so that the next caller in line can have them."""
        if self._lease is not None:
            self._scheduler.release(self._lease)
            self._lease = None

"""Rows of one batch session lent to sequences that come and go, so that the sequences of different callers
advance together in one batched forward pass.

A sequence is admitted with the state of a prompt copied into its rows, holds them while it lives and gives
them back when it ends. The session is sized in powers of two (up to `max_rows`): it grows when a sequence
needs more rows than are free, shrinks when half of it would do, and goes when no sequence is left; a resize
copies the rows in use into a new session, packed from row 0 (O(tokens held), once per admission or
release, next to the thousands of decode steps the rows then take).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from model.engine import Engine
from model.sampling_params import SamplingParams
from model.session import Session


@dataclass(eq=False)
class Lease:
    """The rows one sequence holds: `rows` are session rows (a resize moves them), `lengths` the tokens in each
    (a pending sampled token included), `processed` the tokens run through the model in them since admission."""

    rows: list[int]
    max_tokens: int
    lengths: list[int] = field(default_factory=list)
    processed: int = 0
    admitted_processed: int = 0  # what the rows held, run for the prompt, when they were lent


def _bucket(rows: int, max_rows: int) -> int:
    """The session size for `rows` rows in use: the next power of two, capped at max_rows (never below rows)."""
    return max(rows, min(1 << (rows - 1).bit_length(), max_rows))


class RowPool:
    """Lends the rows of one engine session; not thread-safe (one thread drives it)."""

    def __init__(self, engine: Engine, max_rows: int) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        self.engine = engine
        self.max_rows = max_rows
        self.session: Session | None = None
        self.leases: list[Lease] = []

    @property
    def rows_in_use(self) -> int:
        return sum(len(lease.rows) for lease in self.leases)

    def fits(self, rows: int) -> bool:
        """Whether a sequence of `rows` rows can be admitted now; one needing more than max_rows runs alone."""
        in_use = self.rows_in_use
        return in_use == 0 or in_use + rows <= self.max_rows

    def admit(self, prompt: Session, rows: int, max_tokens: int) -> Lease:
        """Lend `rows` rows of up to max_tokens tokens, each continuing the batch-1 `prompt` session."""
        if not self.fits(rows):
            raise ValueError(f"{rows} rows do not fit: {self.rows_in_use} of {self.max_rows} are in use")
        needed = self.rows_in_use + rows
        longest = max([max_tokens] + [held.max_tokens for held in self.leases])
        session = self.session
        if session is None or session.batch_size < needed or session.max_tokens < longest:
            self._resize(_bucket(needed, self.max_rows), longest)
        taken = {row for held in self.leases for row in held.rows}
        free = [row for row in range(self.session.batch_size) if row not in taken]
        lease = Lease(rows=free[:rows], max_tokens=max_tokens)
        for row in lease.rows:
            self.session.copy_row_(row, prompt)
        lease.admitted_processed = rows * prompt.processed_lengths[0]
        self.leases.append(lease)
        self._update()
        return lease

    def release(self, lease: Lease) -> None:
        """Take the lease's rows back; the session shrinks when half of it would hold the rest."""
        if lease not in self.leases:
            return
        self.leases.remove(lease)
        for row in lease.rows:
            self.session.clear_row_(row)
        lease.rows = []
        if not self.leases:
            self.session = None
            return
        needed = self.rows_in_use
        if _bucket(needed, self.max_rows) < self.session.batch_size:
            self._resize(_bucket(needed, self.max_rows), max(held.max_tokens for held in self.leases))

    def append(self, lease: Lease, tokens: dict[int, list[int]]) -> None:
        """Prefill tokens into the lease's rows, by lease row index."""
        rows: list[list[int]] = [[] for _ in range(self.session.batch_size)]
        for index, ids in tokens.items():
            rows[lease.rows[index]] = list(ids)
        try:
            self.session.append(rows)
        finally:
            self._update()

    def generate(
        self,
        parts: list[tuple[Lease, list[int], list[int]]],
        sampling: SamplingParams,
        stop_ids: set[int],
    ) -> list[list[list[int]]]:
        """Decode, together, the rows of every part (lease, its row indices, their token limits); returns each
        part's tokens per row. Rows of other leases sit the steps out."""
        rows = [lease.rows[index] for lease, indices, _ in parts for index in indices]
        limits = [limit for _, _, part_limits in parts for limit in part_limits]
        try:
            outputs = self.session.generate(limits, sampling, stop_ids, rows=rows)
        finally:
            self._update()
        split, start = [], 0
        for _, indices, _ in parts:
            split.append(outputs[start : start + len(indices)])
            start += len(indices)
        return split

    def _resize(self, rows: int, max_tokens: int) -> None:
        """Move the rows in use into a new session of `rows` rows, packed from row 0."""
        old = self.session
        new = self.engine.new_session(rows, max_tokens)
        next_row = 0
        for lease in self.leases:
            moved = list(range(next_row, next_row + len(lease.rows)))
            for source, target in zip(lease.rows, moved, strict=True):
                new.copy_row_(target, old, source)
            lease.rows = moved
            next_row += len(moved)
        self.session = new

    def _update(self) -> None:
        """Refresh every lease's lengths and count (a decode runs pending tokens of rows sitting it out too)."""
        lengths = self.session.lengths
        processed = self.session.processed_lengths
        for lease in self.leases:
            lease.lengths = [lengths[row] for row in lease.rows]
            lease.processed = sum(processed[row] for row in lease.rows) - lease.admitted_processed

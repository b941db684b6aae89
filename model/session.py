"""A session: B sequences (rows) of one engine that grow by append() and generate(), each token run through the
model once; their caches, pending tokens, last logits and drafting state, and snapshots of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from model.append_steps import MAX_REPLAYED_APPEND
from model.cache import ModelCache
from model.engine_options import MAX_DRAFT_TOKENS
from model.plain_decode import PlainDecoding
from model.row_drafts import RowDrafts
from model.sampling import SamplingParams, make_generator
from model.speculative import SpeculationStats
from model.speculative_decode import SpeculativeDecoding

if TYPE_CHECKING:
    from model.engine import Engine


@dataclass
class Snapshot:
    """A session's state at one moment, for restore()."""

    cache: ModelCache
    processed: list[int]
    pending: list[list[int]]
    last_logits: torch.Tensor
    random_stream: tuple[int | None, torch.Tensor] | None  # (seed, generator state) of the sampling noise
    drafts: tuple | None  # RowDrafts.snapshot(), when the engine speculates


class Session:
    """B sequences (rows) that grow by append() and generate(); each token runs through the model once.

    The rows' state, which append() and the session's decoding (plain or speculative) advance: `processed`, the
    tokens of each row run through the model, `pending`, each row's sampled token not yet run, the next-token
    logits and the cache; and, when the engine speculates, `drafts`."""

    def __init__(self, engine: Engine, batch_size: int, max_tokens: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.engine = engine
        self.model = engine.model
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        device = engine.device
        # One spare KV slot per row: a row sitting out a decode step writes its scratch key there; a verify pass
        # writes up to MAX_DRAFT_TOKENS more scratch keys past a row's length.
        spare = 1 + (MAX_DRAFT_TOKENS if engine.speculates else 0)
        self.cache = ModelCache.allocate(
            engine.config,
            batch_size,
            max_tokens + spare,
            device,
            engine.dtype,
            draft_layers=int(engine.draft_head is not None),
        )
        self.drafts = RowDrafts(engine, batch_size) if engine.speculates else None
        self.speculation = SpeculationStats()
        self.processed_tokens = 0
        self.processed = [0] * batch_size
        self.pending: list[list[int]] = [[] for _ in range(batch_size)]
        self._last_logits = torch.zeros(batch_size, engine.config.vocab_size, device=device)
        self._random_stream: tuple[int | None, torch.Generator] | None = None
        self.decoding = SpeculativeDecoding(self) if engine.speculates else PlainDecoding(self)

    @property
    def lengths(self) -> list[int]:
        """Tokens in each row's sequence, counting a sampled token not yet run through the model."""
        return [done + len(pending) for done, pending in zip(self.processed, self.pending, strict=True)]

    @property
    def last_logits(self) -> torch.Tensor:
        """fp32 logits [B, V] of each row's next token (stale for a row whose sampled token is pending)."""
        return self._last_logits

    @torch.inference_mode()
    def append(self, tokens: list[int] | list[list[int]]) -> None:
        """Prefill new tokens (one list per row when batch_size > 1; [] leaves a row as it is)."""
        rows = self._rows_of(tokens)
        new = [pending + list(row) for pending, row in zip(self.pending, rows, strict=True)]
        vocab_size = self.engine.config.vocab_size
        for index, row in enumerate(new):
            if any(not 0 <= token < vocab_size for token in row):
                raise ValueError(f"row {index} holds a token id outside the vocabulary [0, {vocab_size})")
            if self.processed[index] + len(row) > self.max_tokens:
                raise ValueError(
                    f"row {index} would hold {self.processed[index] + len(row)} tokens, more than "
                    f"this session's max_tokens {self.max_tokens}"
                )
        if self.drafts is not None:  # a pending token is in its row's text already
            self.drafts.extend(rows)
        lengths = [len(row) for row in new]
        if max(lengths) == 1:
            # Rows that sampled their last token (while others may sit out): one step, the decode step's own
            # math and KV bound, so a generation split into calls computes what one call would.
            self.step_rows([length == 1 for length in lengths], [row[:1] or [0] for row in new])
        elif not (self._replays_appends(max(lengths)) and self._replay_append(new)):
            if len(set(lengths)) == 1 and self.batch_size > 1:
                self._prefill(list(range(self.batch_size)), new, self.cache)
            else:
                for index, row in enumerate(new):
                    if row:
                        self._prefill([index], [row], self.cache.row(index))
        self.pending = [[] for _ in range(self.batch_size)]

    def _rows_of(self, tokens: list[int] | list[list[int]]) -> list[list[int]]:
        if self.batch_size == 1 and (not tokens or not isinstance(tokens[0], list | tuple)):
            return [list(tokens)]
        if len(tokens) != self.batch_size or not all(isinstance(row, list | tuple) for row in tokens):
            raise ValueError(f"append() of a batch-{self.batch_size} session takes one token list per row")
        return [list(row) for row in tokens]

    def _replays_appends(self, longest: int) -> bool:
        """Whether an append whose longest row is this long runs as replays of captured prefills: the engine
        captures appends, the session fits its workspace, the append is short and no draft head reads its hidden
        states."""
        replays = self.decodes_in_workspace and self.engine.replays_appends
        return replays and not self._reads_hidden and 0 < longest <= MAX_REPLAYED_APPEND

    def _replay_append(self, rows: list[list[int]]) -> bool:
        """Prefill rows (a token list per row) by replays in the engine's workspace: the session's state copied
        in, each row's pieces replayed, the new positions and states copied back. False, with nothing done, when a
        capture fails (the engine then captures no more appends)."""
        workspace = self.engine.workspace(self.batch_size)
        steps = self.engine.append_steps(self.batch_size)
        appended = [r for r, tokens in enumerate(rows) if tokens]
        with workspace.lock:
            try:
                steps.prepare(rows)
            except RuntimeError as error:
                self.engine.stop_capturing_appends(error)
                return False
            workspace.cache.copy_prefix_(self.cache, max(self.processed))
            for r in appended:
                self._last_logits[r] = steps.run(r, rows[r], self.processed[r])[0]
            ends = [self.processed[r] + len(rows[r]) for r in appended]
            self.cache.copy_span_(workspace.cache, min(self.processed[r] for r in appended), max(ends))
        for r in appended:
            self.processed[r] += len(rows[r])
            self.processed_tokens += len(rows[r])
        return True

    def _prefill(self, row_ids: list[int], rows: list[list[int]], cache: ModelCache) -> None:
        """Run rows (all of one length) through the model in chunks, starting at each row's current length."""
        device = self.engine.device
        length = len(rows[0])
        if length == 0:
            return
        token_matrix = torch.tensor(rows, dtype=torch.long, device=device)
        start = torch.tensor([self.processed[i] for i in row_ids], dtype=torch.long, device=device)
        longest = max(self.processed[i] for i in row_ids)
        chunk = self.engine.prefill_chunk
        hidden = self._reads_hidden
        for offset in range(0, length, chunk):
            piece = token_matrix[:, offset : offset + chunk]
            last = torch.full((len(row_ids),), piece.shape[1] - 1, dtype=torch.long, device=device)
            # Attention reads the cache only up to the chunk's last position (the host knows it).
            bounded = cache.prefix(longest + offset + piece.shape[1])
            logits = self.model.prefill(piece, start + offset, bounded, last, hidden=hidden)
            if hidden:
                logits, states = logits
                for index, row in enumerate(row_ids):
                    self.drafts.add_hidden(row, states[index])
        self._last_logits[row_ids] = logits
        for i in row_ids:
            self.processed[i] += length
        self.processed_tokens += length * len(row_ids)

    def step_rows(self, active: list[bool], tokens: list[list[int]]) -> None:
        """Run one token in each active row, in one step over every row: rows sitting it out keep their states,
        and the KV slot they write at their length is scratch that their next token overwrites."""
        device = self.engine.device
        rows = [i for i, runs in enumerate(active) if runs]
        # The bound the decode step attends over: a captured step's whole workspace, an eager one's prefix.
        bound = None if self.decodes_in_workspace else max(self.processed) + 1
        hidden = self._reads_hidden
        logits = self.model.decode(
            torch.tensor(tokens, dtype=torch.long, device=device),
            torch.tensor(self.processed, dtype=torch.long, device=device),
            self.cache if bound is None else self.cache.prefix(bound),
            active=None if all(active) else torch.tensor(active, device=device),
            hidden=hidden,
        )
        if hidden:
            logits, states = logits
            for row in rows:
                self.drafts.add_hidden(row, states[row])
        self.record_step(rows, logits)

    def record_step(self, rows: list[int], logits: torch.Tensor) -> None:
        """Record that each of rows ran one token, whose next logits are its row of logits [B, V]."""
        if self._all_rows(rows):
            self._last_logits.copy_(logits)
        else:
            self._last_logits[rows] = logits[rows]
        for i in rows:
            self.processed[i] += 1
        self.processed_tokens += len(rows)

    def _all_rows(self, rows: list[int]) -> bool:
        return len(rows) == self.batch_size and rows == list(range(self.batch_size))

    def logits_of(self, rows: list[int]) -> torch.Tensor:
        """The next-token logits [R, V] of rows: the session's own tensor when they are all its rows, in order (a
        1 MB copy a token saved at the real vocabulary)."""
        return self._last_logits if self._all_rows(rows) else self._last_logits[rows]

    @torch.inference_mode()
    def generate(
        self,
        max_new_tokens: int | list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        rows: list[int] | None = None,
    ) -> list[list[int]]:
        """Sample up to max_new_tokens per row for the given rows (default all); a row stops after a stop id.

        Returns one list per requested row. The last sampled token of each row is run through the model
        by the next append() or generate().
        """
        rows = list(range(self.batch_size)) if rows is None else list(rows)
        limits = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(rows)
        if len(limits) != len(rows):
            raise ValueError(f"max_new_tokens lists {len(limits)} limits for {len(rows)} rows")
        pending_in_step = self.decoding.runs_pending_in_step(rows)
        if not pending_in_step and any(self.pending[r] for r in rows):
            self.append([[] for _ in range(self.batch_size)] if self.batch_size > 1 else [])
        for r in rows:
            if self.processed[r] == 0:
                raise ValueError(f"row {r} is empty: append a prompt before generate()")
        limit_per_row = [0] * self.batch_size
        for r, limit in zip(rows, limits, strict=True):
            room = self.max_tokens - self.processed[r] - len(self.pending[r])
            limit_per_row[r] = max(0, min(limit, room))
        if max(limit_per_row) == 0:
            return [[] for _ in rows]
        return self.decoding.generate(rows, limit_per_row, sampling, set(stop_ids), pending_in_step)

    @property
    def decodes_in_workspace(self) -> bool:
        """Whether this session's steps run in the engine's captured workspace (the engine captures them and the
        session fits it), so that an eager step here must attend as a replayed one does."""
        return self.engine.capture is not None and self.max_tokens <= self.engine.max_context

    @property
    def _reads_hidden(self) -> bool:
        """Whether each pass hands the trunk's hidden states to the draft head."""
        return self.drafts is not None and self.drafts.head is not None

    def noise_generator(self, sampling: SamplingParams) -> torch.Generator:
        """The sampling noise's generator: generate() calls with the same seed continue one stream, so a
        generation split into several calls (to check for cancellation) draws the tokens of a single call."""
        if self._random_stream is None or self._random_stream[0] != sampling.seed:
            self._random_stream = (sampling.seed, make_generator(sampling, self.engine.device))
        return self._random_stream[1]

    def copy_row_(self, row: int, source: Session, source_row: int = 0) -> None:
        """Make `row` continue source's row: its KV prefix, GDN states, pending token and next-token logits."""
        length = source.processed[source_row]
        pending = source.pending[source_row]
        if length + len(pending) > self.max_tokens:
            raise ValueError(
                f"the source row holds {length + len(pending)} tokens, more than this session's max_tokens "
                f"{self.max_tokens}"
            )
        self.cache.row(row).copy_prefix_(source.cache, length, source_row=source_row)
        self.processed[row] = length
        self.pending[row] = list(pending)
        self._last_logits[row] = source._last_logits[source_row]
        if self.drafts is not None:
            self.drafts.copy_row(row, source.drafts, source_row)

    def clear_row_(self, row: int) -> None:
        """Empty `row` until copy_row_() fills it again (its old state stays behind until then, unread)."""
        self.processed[row] = 0
        self.pending[row] = []
        if self.drafts is not None:
            self.drafts.clear(row)

    @property
    def processed_lengths(self) -> list[int]:
        """Tokens of each row already run through the model (lengths less a sampled token still pending)."""
        return list(self.processed)

    def snapshot(self) -> Snapshot:
        """Copy the state (only the used part of the KV caches) so restore() can return to it."""
        used = max(self.processed)
        stream = self._random_stream
        return Snapshot(
            self.cache.clone_prefix(used),
            list(self.processed),
            [list(p) for p in self.pending],
            self._last_logits.clone(),
            None if stream is None else (stream[0], stream[1].get_state()),
            None if self.drafts is None else self.drafts.snapshot(),
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Return every row to the snapshot's state; processed_tokens keeps counting work already done."""
        if len(snapshot.processed) != self.batch_size:
            raise ValueError(f"snapshot has {len(snapshot.processed)} rows, this session {self.batch_size}")
        self.cache.copy_prefix_(snapshot.cache, max(snapshot.processed))
        self.processed = list(snapshot.processed)
        self.pending = [list(p) for p in snapshot.pending]
        self._last_logits.copy_(snapshot.last_logits)
        if snapshot.drafts is not None:
            self.drafts.restore(snapshot.drafts)
        self._random_stream = None
        if snapshot.random_stream is not None:
            seed, state = snapshot.random_stream
            generator = torch.Generator(device=self.engine.device)
            generator.set_state(state)
            self._random_stream = (seed, generator)

"""A session: B sequences (rows) of one engine that grow by append() and generate(), each token run through the
model once; their caches, pending tokens, last logits and drafting state, and snapshots of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from model.cache import ModelCache, StateTrail
from model.decode_step import is_stop
from model.decoder import Decoder, DecodeStep, stop_width
from model.draft_head import DraftHeadRows
from model.drafting import NgramIndex
from model.engine_options import MAX_DRAFT_TOKENS
from model.sampling import SamplingParams, draw_noise, make_generator, sample
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
    texts: list[NgramIndex] | None  # each row's tokens for drafting, when the engine speculates
    draft_head: tuple | None  # the draft head's rows (DraftHeadRows.snapshot), when the engine has one


class Session(SpeculativeDecoding):
    """B sequences (rows) that grow by append() and generate(); each token runs through the model once."""

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
        # Each row's tokens, indexed for drafting, when the engine speculates.
        self._texts = [NgramIndex() for _ in range(batch_size)] if engine.speculates else None
        self._head_rows = None
        if engine.draft_head is not None:
            self._head_rows = DraftHeadRows(
                engine.draft_head, batch_size, engine.speculate_tokens, engine.prefill_chunk
            )
        self._trail: StateTrail | None = None
        self.speculation = SpeculationStats()
        self.processed_tokens = 0
        self._processed = [0] * batch_size
        self._pending: list[list[int]] = [[] for _ in range(batch_size)]
        self._last_logits = torch.zeros(batch_size, engine.config.vocab_size, device=device)
        self._eager: Decoder | None = None  # decodes in self.cache when the engine captures no steps
        self._random_stream: tuple[int | None, torch.Generator] | None = None

    @property
    def lengths(self) -> list[int]:
        """Tokens in each row's sequence, counting a sampled token not yet run through the model."""
        return [done + len(pending) for done, pending in zip(self._processed, self._pending, strict=True)]

    @property
    def last_logits(self) -> torch.Tensor:
        """fp32 logits [B, V] of each row's next token (stale for a row whose sampled token is pending)."""
        return self._last_logits

    @torch.inference_mode()
    def append(self, tokens: list[int] | list[list[int]]) -> None:
        """Prefill new tokens (one list per row when batch_size > 1; [] leaves a row as it is)."""
        rows = self._rows_of(tokens)
        new = [pending + list(row) for pending, row in zip(self._pending, rows, strict=True)]
        vocab_size = self.engine.config.vocab_size
        for index, row in enumerate(new):
            if any(not 0 <= token < vocab_size for token in row):
                raise ValueError(f"row {index} holds a token id outside the vocabulary [0, {vocab_size})")
            if self._processed[index] + len(row) > self.max_tokens:
                raise ValueError(
                    f"row {index} would hold {self._processed[index] + len(row)} tokens, more than "
                    f"this session's max_tokens {self.max_tokens}"
                )
        if self._texts is not None:  # a pending token is in its row's text already
            for text, row in zip(self._texts, rows, strict=True):
                text.extend(row)
        lengths = [len(row) for row in new]
        if max(lengths) == 1:
            # Rows that sampled their last token (while others may sit out): one step, the decode step's own
            # math and KV bound, so a generation split into calls computes what one call would.
            self._step_rows([length == 1 for length in lengths], [row[:1] or [0] for row in new])
        elif len(set(lengths)) == 1 and self.batch_size > 1:
            self._prefill(list(range(self.batch_size)), new, self.cache)
        else:
            for index, row in enumerate(new):
                if row:
                    self._prefill([index], [row], self.cache.row(index))
        self._pending = [[] for _ in range(self.batch_size)]

    def _rows_of(self, tokens: list[int] | list[list[int]]) -> list[list[int]]:
        if self.batch_size == 1 and (not tokens or not isinstance(tokens[0], list | tuple)):
            return [list(tokens)]
        if len(tokens) != self.batch_size or not all(isinstance(row, list | tuple) for row in tokens):
            raise ValueError(f"append() of a batch-{self.batch_size} session takes one token list per row")
        return [list(row) for row in tokens]

    def _prefill(self, row_ids: list[int], rows: list[list[int]], cache: ModelCache) -> None:
        """Run rows (all of one length) through the model in chunks, starting at each row's current length."""
        device = self.engine.device
        length = len(rows[0])
        if length == 0:
            return
        token_matrix = torch.tensor(rows, dtype=torch.long, device=device)
        start = torch.tensor([self._processed[i] for i in row_ids], dtype=torch.long, device=device)
        chunk = self.engine.prefill_chunk
        heads = self._head_rows
        for offset in range(0, length, chunk):
            piece = token_matrix[:, offset : offset + chunk]
            last = torch.full((len(row_ids),), piece.shape[1] - 1, dtype=torch.long, device=device)
            logits = self.model.prefill(piece, start + offset, cache, last, hidden=heads is not None)
            if heads is not None:
                logits, hidden = logits
                for index, row in enumerate(row_ids):
                    heads.add(row, hidden[index])
        self._last_logits[row_ids] = logits
        for i in row_ids:
            self._processed[i] += length
        self.processed_tokens += length * len(row_ids)

    def _step_rows(self, active: list[bool], tokens: list[list[int]]) -> None:
        """Run one token in each active row, in one step over every row: rows sitting it out keep their states,
        and the KV slot they write at their length is scratch that their next token overwrites."""
        device = self.engine.device
        rows = [i for i, runs in enumerate(active) if runs]
        # The bound the decode step attends over: a captured step's whole workspace, an eager one's prefix.
        bound = None if self._decoder().captured else max(self._processed) + 1
        heads = self._head_rows
        logits = self.model.decode(
            torch.tensor(tokens, dtype=torch.long, device=device),
            torch.tensor(self._processed, dtype=torch.long, device=device),
            self.cache if bound is None else self.cache.prefix(bound),
            active=None if all(active) else torch.tensor(active, device=device),
            hidden=heads is not None,
        )
        if heads is not None:
            logits, hidden = logits
            for row in rows:
                heads.add(row, hidden[row])
        self._stepped(rows, logits)

    def _stepped(self, rows: list[int], logits: torch.Tensor) -> None:
        """Record that each of rows ran one token, whose next logits are its row of logits [B, V]."""
        if self._all_rows(rows):
            self._last_logits.copy_(logits)
        else:
            self._last_logits[rows] = logits[rows]
        for i in rows:
            self._processed[i] += 1
        self.processed_tokens += len(rows)

    def _all_rows(self, rows: list[int]) -> bool:
        return len(rows) == self.batch_size and rows == list(range(self.batch_size))

    def _logits_of(self, rows: list[int]) -> torch.Tensor:
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
        *,
        forced: list[list[int]] | None = None,
    ) -> list[list[int]]:
        """Sample up to max_new_tokens per row for the given rows (default all); a row stops after a stop id.

        Returns one list per requested row. The last sampled token of each row is run through the model
        by the next append() or generate(). forced (one list per requested row, a speculating engine only):
        the tokens each row emits in place of the model's choices, as replayed text does in benchmarks; every
        draft and forward pass runs as it would.
        """
        rows = list(range(self.batch_size)) if rows is None else list(rows)
        limits = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(rows)
        if len(limits) != len(rows):
            raise ValueError(f"max_new_tokens lists {len(limits)} limits for {len(rows)} rows")
        decoder = None if self.engine.speculates else self._decoder()
        # A captured step runs each row's pending token as the call's first step: run apart, it would be an eager
        # forward pass, several replayed steps' time on a GPU, once per call (the scheduler calls every 16 tokens).
        in_step = decoder is not None and decoder.captured and all(len(self._pending[r]) == 1 for r in rows)
        if not in_step and any(self._pending[r] for r in rows):
            self.append([[] for _ in range(self.batch_size)] if self.batch_size > 1 else [])
        for r in rows:
            if self._processed[r] == 0:
                raise ValueError(f"row {r} is empty: append a prompt before generate()")
        limit_per_row = [0] * self.batch_size
        for r, limit in zip(rows, limits, strict=True):
            room = self.max_tokens - self._processed[r] - len(self._pending[r])
            limit_per_row[r] = max(0, min(limit, room))
        if max(limit_per_row) == 0:
            return [[] for _ in rows]
        if forced is not None and not self.engine.speculates:
            raise ValueError("forced tokens replace the targets of verify passes: the engine must speculate")
        if self.engine.speculates:
            replay = None if forced is None else dict(zip(rows, forced, strict=True))
            return self._speculate(rows, limit_per_row, sampling, set(stop_ids), replay)
        stop = sorted(stop_ids) or [-1]
        with decoder.lock:
            try:
                step = decoder.step(sampling, stop_width(len(stop)))
            except RuntimeError as error:
                if not decoder.captured:
                    raise
                self.engine.stop_capturing(error)
                decoder.capture = None  # this call still decodes, eagerly, in the dropped workspace
                step = decoder.step(sampling, stop_width(len(stop)))
                if in_step:
                    self.append([[] for _ in range(self.batch_size)] if self.batch_size > 1 else [])
                    in_step = False
            return self._decode(rows, limit_per_row, sampling, stop, decoder, step, in_step)

    def _decode(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop: list[int],
        decoder: Decoder,
        step: DecodeStep,
        pending_in_step: bool,
    ) -> list[list[int]]:
        """Decode in decoder's buffers; pending_in_step: every row asked for has one pending token, which the
        first step runs (sampling the call's first token) in place of an append."""
        device = self.engine.device
        shared = decoder.cache is not self.cache
        longest = max(self._processed)
        if shared:
            decoder.cache.copy_prefix_(self.cache, longest)
        step.stop.fill_(-1)
        step.stop[: len(stop)].copy_(torch.tensor(stop, dtype=torch.long, device=device))
        decoder.temperature.fill_(sampling.temperature)
        decoder.top_p.fill_(sampling.top_p)
        noise = step.noise
        generator = None
        if noise is not None:
            generator = self._generator(sampling)
            draw_noise(noise, generator)
        decoder.limit.copy_(torch.tensor(limit_per_row, device=device))
        decoder.start.copy_(torch.tensor(self._processed, device=device))
        selected = decoder.limit > 0
        if pending_in_step:
            pending = [row[0] if row else 0 for row in self._pending]
            decoder.tokens.copy_(torch.tensor(pending, dtype=torch.long, device=device))
            decoder.generated.zero_()
            decoder.active.copy_(selected)
        else:
            first = sample(
                self._last_logits, sampling, noise, temperature=decoder.temperature, top_p=decoder.top_p
            )
            decoder.tokens.copy_(first)
            decoder.out[:, 0] = first
            decoder.generated.copy_(selected.long())
            decoder.active.copy_(selected & ~is_stop(first, step.stop) & (decoder.generated < decoder.limit))
        for done in range(0 if pending_in_step else 1, max(limit_per_row)):
            if noise is not None and done > 0:  # the noise drawn above serves the call's first token
                draw_noise(noise, generator)
            step.run(longest + done + int(pending_in_step))
            if done and done % self.engine.sync_every == 0 and not bool(decoder.active.any()):
                break
        generated = decoder.generated.tolist()
        starts = decoder.start.tolist()
        if shared:
            # Entries past a row's new length are scratch: copying them along is harmless.
            self.cache.copy_span_(decoder.cache, min(self._processed), max(starts))
        outputs = decoder.out[:, : max(generated)].cpu()
        result = []
        for r in rows:
            tokens = outputs[r, : generated[r]].tolist()
            self.processed_tokens += starts[r] - self._processed[r]
            self._processed[r] = starts[r]
            if tokens:  # a row that got no token keeps the one it may have pending
                self._pending[r] = tokens[-1:]
            result.append(tokens)
        return result

    def _decoder(self) -> Decoder:
        """The engine's capturing decoder for this batch size when it has one and this session fits it, else
        this session's own, which decodes in its cache."""
        engine = self.engine
        if engine.capture is not None and self.max_tokens <= engine.max_context:
            return engine.workspace(self.batch_size)
        if self._eager is None:
            self._eager = Decoder(self.model, self.cache, compiled=self.engine.options.compile)
        return self._eager

    def _generator(self, sampling: SamplingParams) -> torch.Generator:
        """The sampling noise's generator: generate() calls with the same seed continue one stream, so a
        generation split into several calls (to check for cancellation) draws the tokens of a single call."""
        if self._random_stream is None or self._random_stream[0] != sampling.seed:
            self._random_stream = (sampling.seed, make_generator(sampling, self.engine.device))
        return self._random_stream[1]

    def copy_row_(self, row: int, source: Session, source_row: int = 0) -> None:
        """Make `row` continue source's row: its KV prefix, GDN states, pending token and next-token logits."""
        length = source._processed[source_row]
        pending = source._pending[source_row]
        if length + len(pending) > self.max_tokens:
            raise ValueError(
                f"the source row holds {length + len(pending)} tokens, more than this session's max_tokens "
                f"{self.max_tokens}"
            )
        self.cache.row(row).copy_prefix_(source.cache, length, source_row=source_row)
        self._processed[row] = length
        self._pending[row] = list(pending)
        self._last_logits[row] = source._last_logits[source_row]
        if self._texts is not None:
            self._texts[row] = source._texts[source_row].copy()
        if self._head_rows is not None:
            self._head_rows.copy_row(row, source._head_rows, source_row)

    def clear_row_(self, row: int) -> None:
        """Empty `row` until copy_row_() fills it again (its old state stays behind until then, unread)."""
        self._processed[row] = 0
        self._pending[row] = []
        if self._texts is not None:
            self._texts[row] = NgramIndex()
        if self._head_rows is not None:
            self._head_rows.clear(row)

    @property
    def processed_lengths(self) -> list[int]:
        """Tokens of each row already run through the model (lengths less a sampled token still pending)."""
        return list(self._processed)

    def snapshot(self) -> Snapshot:
        """Copy the state (only the used part of the KV caches) so restore() can return to it."""
        used = max(self._processed)
        stream = self._random_stream
        return Snapshot(
            self.cache.clone_prefix(used),
            list(self._processed),
            [list(p) for p in self._pending],
            self._last_logits.clone(),
            None if stream is None else (stream[0], stream[1].get_state()),
            None if self._texts is None else [text.copy() for text in self._texts],
            None if self._head_rows is None else self._head_rows.snapshot(),
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Return every row to the snapshot's state; processed_tokens keeps counting work already done."""
        if len(snapshot.processed) != self.batch_size:
            raise ValueError(f"snapshot has {len(snapshot.processed)} rows, this session {self.batch_size}")
        self.cache.copy_prefix_(snapshot.cache, max(snapshot.processed))
        self._processed = list(snapshot.processed)
        self._pending = [list(p) for p in snapshot.pending]
        self._last_logits.copy_(snapshot.last_logits)
        if snapshot.texts is not None:
            self._texts = [text.copy() for text in snapshot.texts]
        if snapshot.draft_head is not None:
            self._head_rows.restore(snapshot.draft_head)
        self._random_stream = None
        if snapshot.random_stream is not None:
            seed, state = snapshot.random_stream
            generator = torch.Generator(device=self.engine.device)
            generator.set_state(state)
            self._random_stream = (seed, generator)

"""The engine: a loaded model plus sessions that keep each sequence's state across appends and generations."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from model.cache import ModelCache
from model.config import Qwen35Config
from model.cuda_graph import CapturedStep
from model.loader import check_model_dir, load_weights
from model.qwen35 import Qwen35Model
from model.sampling import SamplingParams, candidate_count, draw_noise, make_generator, sample
from model.tokenizer import Tokenizer

log = logging.getLogger(__name__)


def _is_stop(tokens: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """Whether each token is a stop id, by a broadcast compare that a CUDA graph can hold."""
    return (tokens[:, None] == stop_ids[None, :]).any(-1)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


class Engine:
    """A Qwen3.5 model and its tokenizer, ready to open sessions."""

    def __init__(
        self,
        model: Qwen35Model,
        tokenizer: Tokenizer,
        *,
        max_context: int = 32768,
        prefill_chunk: int = 2048,
        cuda_graph: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config: Qwen35Config = model.config
        self.device = model.device
        self.dtype = model.dtype
        self.max_context = max_context
        self.prefill_chunk = prefill_chunk
        self.cuda_graph = cuda_graph and self.device.type == "cuda"
        # On a GPU the host checks for finished rows only every few tokens so the device never waits.
        self.sync_every = 8 if self.device.type == "cuda" else 1
        self.graph_pool = torch.cuda.graph_pool_handle() if self.cuda_graph else None

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        max_context: int = 32768,
        prefill_chunk: int = 2048,
        cuda_graph: bool = True,
    ) -> Engine:
        """Load config, tokenizer and weights of model_dir; cuda when available, bf16 there and fp32 on CPU."""
        path = check_model_dir(model_dir)
        device = torch.device(device) if device is not None else default_device()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but torch sees no CUDA device here: use device cpu")
        dtype = dtype or default_dtype(device)
        config = Qwen35Config.from_model_dir(path)
        weights = load_weights(path, config, device, dtype)
        tokenizer = Tokenizer.from_model_dir(path)
        return cls(
            Qwen35Model(config, weights),
            tokenizer,
            max_context=max_context,
            prefill_chunk=prefill_chunk,
            cuda_graph=cuda_graph,
        )

    def new_session(self, batch_size: int = 1, max_tokens: int | None = None) -> Session:
        """A session of batch_size empty rows, each holding up to max_tokens (default max_context) tokens."""
        return Session(self, batch_size, max_tokens or self.max_context)


@dataclass
class Snapshot:
    """A session's state at one moment, for restore()."""

    cache: ModelCache
    processed: list[int]
    pending: list[list[int]]
    last_logits: torch.Tensor


class Session:
    """B sequences (rows) that grow by append() and generate(); each token runs through the model once."""

    def __init__(self, engine: Engine, batch_size: int, max_tokens: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.engine = engine
        self.model = engine.model
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        device = engine.device
        # One spare KV slot per row: a row sitting out a decode step writes its scratch key there.
        self.cache = ModelCache.allocate(engine.config, batch_size, max_tokens + 1, device, engine.dtype)
        self.processed_tokens = 0
        self._processed = [0] * batch_size
        self._pending: list[list[int]] = [[] for _ in range(batch_size)]
        self._last_logits = torch.zeros(batch_size, engine.config.vocab_size, device=device)
        # Static decode buffers: the captured graph reads and writes exactly these tensors.
        self._tokens = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._start = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._active = torch.zeros(batch_size, dtype=torch.bool, device=device)
        self._generated = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._limit = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._out = torch.zeros(batch_size, max_tokens + 1, dtype=torch.long, device=device)
        self._zero_index = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._graphs: dict[tuple, tuple[CapturedStep, torch.Tensor | None, torch.Tensor]] = {}

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
        lengths = {len(row) for row in new}
        if len(lengths) == 1 and self.batch_size > 1:
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
        for offset in range(0, length, chunk):
            piece = token_matrix[:, offset : offset + chunk]
            last = torch.full((len(row_ids),), piece.shape[1] - 1, dtype=torch.long, device=device)
            logits = self.model.forward(piece, start + offset, cache, logits_at=last)
        self._last_logits[row_ids] = logits
        for i in row_ids:
            self._processed[i] += length
        self.processed_tokens += length * len(row_ids)

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
        if any(self._pending[r] for r in rows):
            self.append([[] for _ in range(self.batch_size)] if self.batch_size > 1 else [])
        for r in rows:
            if self._processed[r] == 0:
                raise ValueError(f"row {r} is empty: append a prompt before generate()")
        limit_per_row = [0] * self.batch_size
        for r, limit in zip(rows, limits, strict=True):
            limit_per_row[r] = max(0, min(limit, self.max_tokens - self._processed[r]))
        if max(limit_per_row) == 0:
            return [[] for _ in rows]
        device = self.engine.device
        stop = torch.tensor(sorted(stop_ids) or [-1], dtype=torch.long, device=device)
        step, noise, stop_buffer = self._decode_step(sampling, len(stop))
        stop_buffer.copy_(stop)
        generator = None
        if noise is not None:
            generator = make_generator(sampling, device)
            draw_noise(noise, generator)
        self._limit.copy_(torch.tensor(limit_per_row, device=device))
        self._start.copy_(torch.tensor(self._processed, device=device))
        selected = self._limit > 0
        first = sample(self._last_logits, sampling, noise)
        self._tokens.copy_(first)
        self._out[:, 0] = first
        self._generated.copy_(selected.long())
        self._active.copy_(selected & ~_is_stop(first, stop_buffer) & (self._generated < self._limit))
        for done in range(1, max(limit_per_row)):
            if noise is not None:
                draw_noise(noise, generator)
            step()
            if done % self.engine.sync_every == 0 and not bool(self._active.any()):
                break
        generated = self._generated.tolist()
        starts = self._start.tolist()
        outputs = self._out[:, : max(generated)].cpu()
        result = []
        for r in rows:
            tokens = outputs[r, : generated[r]].tolist()
            self.processed_tokens += starts[r] - self._processed[r]
            self._processed[r] = starts[r]
            self._pending[r] = tokens[-1:]
            result.append(tokens)
        return result

    def _decode_step(self, sampling: SamplingParams, stop_count: int):
        """The one-token step for these sampling settings, captured as a CUDA graph on a GPU.

        Returns (step, noise buffer or None when greedy, stop-id buffer).
        """
        key = (sampling.temperature, sampling.top_p, sampling.top_k, stop_count)
        if key in self._graphs:
            return self._graphs[key]
        device = self.engine.device
        width = candidate_count(sampling, self.engine.config.vocab_size)
        noise = None if sampling.greedy else torch.ones(self.batch_size, width, device=device)
        stop = torch.full((stop_count,), -1, dtype=torch.long, device=device)
        scratch_column = self._out.shape[1] - 1

        def step() -> None:
            was_active = self._active
            # Without a graph the host may look: when every row runs, the sit-out masking is skipped.
            masked = self.engine.cuda_graph or not bool(was_active.all())
            logits = self.model.forward(
                self._tokens[:, None],
                self._start,
                self.cache,
                logits_at=self._zero_index,
                active=was_active if masked else None,
            )
            new = sample(logits, sampling, noise)
            column = torch.where(was_active, self._generated, scratch_column)
            self._out.scatter_(1, column[:, None], new[:, None])
            self._start.add_(was_active)
            self._generated.add_(was_active)
            self._tokens.copy_(torch.where(was_active, new, self._tokens))
            self._active.copy_(was_active & ~_is_stop(new, stop) & (self._generated < self._limit))

        entry = (step, noise, stop)
        if self.engine.cuda_graph:
            # Captured with every row sitting out, so the warm-up runs change no state.
            self._active.zero_()
            try:
                entry = (CapturedStep(step, pool=self.engine.graph_pool), noise, stop)
            except RuntimeError as error:
                log.warning(
                    "decode step could not be captured as a CUDA graph, running it eagerly: %s", error
                )
                self.engine.cuda_graph = False
        self._graphs[key] = entry
        return entry

    def fork(self, n: int) -> Session:
        """A batch-n session whose rows all continue this batch-1 session."""
        if self.batch_size != 1:
            raise ValueError(f"fork() needs a batch-1 session, this one has {self.batch_size} rows")
        child = Session(self.engine, n, self.max_tokens)
        child.cache.copy_prefix_(self.cache, self._processed[0], source_row=0)
        child._processed = self._processed * n
        child._pending = [list(self._pending[0]) for _ in range(n)]
        child._last_logits.copy_(self._last_logits.expand(n, -1))
        return child

    def snapshot(self) -> Snapshot:
        """Copy the state (only the used part of the KV caches) so restore() can return to it."""
        used = max(self._processed)
        return Snapshot(
            self.cache.clone_prefix(used),
            list(self._processed),
            [list(p) for p in self._pending],
            self._last_logits.clone(),
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Return every row to the snapshot's state; processed_tokens keeps counting work already done."""
        if len(snapshot.processed) != self.batch_size:
            raise ValueError(f"snapshot has {len(snapshot.processed)} rows, this session {self.batch_size}")
        self.cache.copy_prefix_(snapshot.cache, max(snapshot.processed))
        self._processed = list(snapshot.processed)
        self._pending = [list(p) for p in snapshot.pending]
        self._last_logits.copy_(snapshot.last_logits)

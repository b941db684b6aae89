"""The engine: a loaded model plus sessions that keep each sequence's state across appends and generations."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from kernels import cpu as cpu_kernels
from model.cache import ModelCache
from model.config import Qwen35Config
from model.cpu import native_bf16, physical_cores
from model.cuda_graph import CudaGraphCapture, StepCapture
from model.decode_step import DecodeBuffers, compiled_decode_step, decode_step, is_stop
from model.loader import check_model_dir, load_weights
from model.quantize import QUANTIZE_CHOICES
from model.qwen35 import Qwen35Model
from model.sampling import SamplingParams, draw_noise, make_generator, sample, sampling_mode
from model.tokenizer import Tokenizer

log = logging.getLogger(__name__)

# Under an engine's cache directory: quantized weights, and torch.compile's compiled graphs.
QUANTIZED_CACHE = "quantized-weights"
COMPILE_CACHE = "torch-compile"

# Width of the stop-id buffer a decode step compares against (padded with -1): stop lists up to this long
# share one step; a longer one gets the next power of two.
STOP_SLOTS = 8


def _stop_width(count: int) -> int:
    """Slots of the stop-id buffer for count stop ids."""
    return max(STOP_SLOTS, 1 << (count - 1).bit_length())


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """The activations' dtype: bf16 on a GPU and on a CPU that multiplies bf16 natively; else fp32. Either way a
    CPU keeps the weights as the checkpoint stores them (bf16) and its decode products widen them in registers
    (model/cpu_weights.py), so fp32 activations cost no weight bytes."""
    return torch.bfloat16 if device.type == "cuda" or native_bf16() else torch.float32


def _chosen_dtype(device: torch.device) -> torch.dtype:
    dtype = default_dtype(device)
    if device.type == "cpu":
        why = (
            "the CPU multiplies bf16 natively"
            if dtype == torch.bfloat16
            else "the CPU has no native bf16 (avx512_bf16, AMX or Arm BF16), so bf16 products would run slower"
        )
        log.info("computing in %s on the CPU: %s (--dtype overrides)", str(dtype).removeprefix("torch."), why)
    return dtype


def set_cpu_threads(threads: int | None) -> int:
    """Give torch `threads` threads, or one per physical core unless OMP_NUM_THREADS already decided; returns
    the count in use."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if threads is None and "OMP_NUM_THREADS" not in os.environ:
        threads = physical_cores()
    if threads is not None:
        torch.set_num_threads(threads)
    count = torch.get_num_threads()
    log.info("running on %d CPU thread%s (--threads overrides)", count, "" if count == 1 else "s")
    return count


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
        capture: StepCapture | None = None,
        compile_decode: bool = False,
    ) -> None:
        """cuda_graph: capture decode steps as CUDA graphs on a CUDA device; capture: a StepCapture to use
        instead (on any device); compile_decode: run the decode steps that are not captured through
        torch.compile (each sampling mode compiles once per process, on first use)."""
        self.model = model
        self.tokenizer = tokenizer
        self.config: Qwen35Config = model.config
        self.device = model.device
        self.dtype = model.dtype
        self.max_context = max_context
        self.prefill_chunk = prefill_chunk
        if capture is None and cuda_graph and self.device.type == "cuda":
            capture = CudaGraphCapture()
        self.capture = capture
        self.compile_decode = compile_decode
        self._workspaces: dict[int, Decoder] = {}
        # On a GPU the host checks for finished rows only every few tokens so the device never waits.
        self.sync_every = 8 if self.device.type == "cuda" else 1

    @property
    def cuda_graph(self) -> bool:
        """Whether decode steps are captured and replayed (False once a capture has failed)."""
        return self.capture is not None

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
        quantize: str | None = None,
        threads: int | None = None,
        compile_decode: bool = False,
        cache_dir: str | Path | None = None,
    ) -> Engine:
        """Load config, tokenizer and weights of model_dir; cuda when available, else the CPU.

        dtype (of the activations) defaults to default_dtype(device); quantize "int8" or "int4" stores the
        projections and the LM head quantized (CPU only, see load_weights); threads sets torch's CPU threads
        (default: one per physical core); compile_decode compiles the CPU decode step with torch.compile.
        cache_dir keeps quantized weights and compiled steps for the next run.
        """
        path = check_model_dir(model_dir)
        device = torch.device(device) if device is not None else default_device()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but torch sees no CUDA device here: use device cpu")
        if quantize is not None and quantize not in QUANTIZE_CHOICES:
            raise ValueError(f"unknown quantization {quantize!r}: choose {', '.join(QUANTIZE_CHOICES)}")
        if quantize is not None and device.type != "cpu":
            raise ValueError(
                f"{quantize} weights run on the CPU only: on a GPU the bf16 weights stream fast enough; "
                "drop the quantization or use device cpu"
            )
        if compile_decode and device.type != "cpu":
            raise ValueError("compile_decode compiles the CPU decode step; on a GPU it is a CUDA graph")
        if device.type == "cpu":
            set_cpu_threads(threads)
            cpu_kernels.products()  # built (once per machine) before the first token, not during it
        dtype = dtype or _chosen_dtype(device)
        config = Qwen35Config.from_model_dir(path)
        cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        if compile_decode and cache_dir is not None:
            # Inductor keeps its compiled graphs there, so a later run skips most of the compile.
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / COMPILE_CACHE))
        weights = load_weights(
            path, config, device, dtype, quantize, cache_dir and cache_dir / QUANTIZED_CACHE
        )
        tokenizer = Tokenizer.from_model_dir(path)
        return cls(
            Qwen35Model(config, weights),
            tokenizer,
            max_context=max_context,
            prefill_chunk=prefill_chunk,
            cuda_graph=cuda_graph,
            compile_decode=compile_decode,
        )

    def warm_up(self, sampling: SamplingParams) -> None:
        """Run one decode step in sampling's mode on a scratch row, so that compiling the step (compile_decode)
        happens now rather than in the first request."""
        session = self.new_session(1, max_tokens=4)
        session.append([0])
        session.generate(2, sampling, stop_ids=set())  # n tokens run n - 1 decode steps

    def new_session(self, batch_size: int = 1, max_tokens: int | None = None) -> Session:
        """A session of batch_size empty rows, each holding up to max_tokens (default max_context) tokens."""
        return Session(self, batch_size, max_tokens or self.max_context)

    def workspace(self, batch_size: int) -> Decoder:
        """The capturing decoder that every session of batch_size shares (see Decoder), made on first use."""
        if self.capture is None:
            raise RuntimeError("this engine captures no decode steps: sessions decode in their own caches")
        decoder = self._workspaces.get(batch_size)
        if decoder is None:
            cache = ModelCache.allocate(
                self.config, batch_size, self.max_context + 1, self.device, self.dtype
            )
            decoder = self._workspaces[batch_size] = Decoder(self.model, cache, self.capture)
        return decoder

    def stop_capturing(self, reason: Exception) -> None:
        """Fall back to eager decoding for good (sessions decode in their own caches from now on)."""
        log.warning(
            "decode step could not be captured as a CUDA graph, decoding eagerly from now on: %s", reason
        )
        self.capture = None
        self._workspaces.clear()


@dataclass(frozen=True)
class DecodeStep:
    """One decode step and the buffers only it uses: noise (None when greedy) and the stop ids.

    run(kv_bound) takes a host-side bound on the KV positions the step reads and writes: an eager step
    attends over only those, a replayed graph over the whole cache under its device-side mask.
    """

    run: Callable[[int], None]
    noise: torch.Tensor | None
    stop: torch.Tensor


class Decoder:
    """The batched one-token decode of B rows over one cache: the static buffers every step reads and writes,
    and one step per (sampling mode, stop-list width), captured when the decoder has a StepCapture.

    A captured step replays fixed kernels on fixed addresses, so a capturing decoder belongs to the engine,
    one per batch size, and is shared by the sessions of that size in turn (as gpt-fast and nano-vllm keep
    one static cache per batch size): generate() copies the session's state in (its used KV prefix and the
    GDN states), replays the step, and copies the new KV positions and the GDN states back. The copies cost
    O(used tokens) per generate() call, small next to the decode steps they serve, and no session's only copy
    of its state is ever in the shared cache. A session without captured steps decodes in its own cache
    through a decoder of its own.

    The cache's last KV position is spare, never a real token: a row sitting out a step writes its scratch
    key at its own length (at most the spare), and a capture runs with every row sitting out at the spare
    position, so the capture's warm-up and recording write only the spare slot, the spare output column and
    GDN states that the masked update leaves as they are (and that the copy-in overwrites before use).
    """

    def __init__(
        self,
        model: Qwen35Model,
        cache: ModelCache,
        capture: StepCapture | None = None,
        compiled: bool = False,
    ) -> None:
        """compiled: run the step through torch.compile (a decoder that does not capture)."""
        self.model = model
        self.cache = cache
        self.capture = capture
        self.compiled = compiled and capture is None
        self.lock = threading.Lock()
        batch = cache.batch_size
        device = model.device
        self.spare = cache.max_tokens - 1
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.start = torch.zeros(batch, dtype=torch.long, device=device)
        self.active = torch.zeros(batch, dtype=torch.bool, device=device)
        self.generated = torch.zeros(batch, dtype=torch.long, device=device)
        self.limit = torch.zeros(batch, dtype=torch.long, device=device)
        # Column `spare` takes the tokens sampled for rows that sit out.
        self.out = torch.zeros(batch, cache.max_tokens, dtype=torch.long, device=device)
        self.zero_index = torch.zeros(batch, dtype=torch.long, device=device)
        self.temperature = torch.ones(1, device=device)
        self.top_p = torch.ones(1, device=device)
        self.buffers = DecodeBuffers(
            self.tokens,
            self.start,
            self.active,
            self.generated,
            self.limit,
            self.out,
            self.zero_index,
            self.temperature,
            self.top_p,
        )
        self._steps: dict[tuple, DecodeStep] = {}

    @property
    def captured(self) -> bool:
        return self.capture is not None

    def step(self, sampling: SamplingParams, stop_width: int) -> DecodeStep:
        """The step for sampling's mode and stop_width stop ids, made (and captured) on first use; RuntimeError
        when the capture fails."""
        mode = sampling_mode(sampling, self.model.config.vocab_size)
        key = (mode, stop_width)
        if key in self._steps:
            return self._steps[key]
        sampling = replace(sampling)  # the step keeps the settings of its mode, whatever the caller changes
        device = self.model.device
        batch = self.cache.batch_size
        noise = None if mode is None else torch.ones(batch, mode[0], device=device)
        stop = torch.full((stop_width,), -1, dtype=torch.long, device=device)
        captured = self.captured

        def run(kv_bound: int | None = None) -> None:
            # An eager step may look at the host: when every row runs, the sit-out masking is skipped.
            masked = captured or self.compiled or not bool(self.active.all())
            cache = self.cache if kv_bound is None else self.cache.prefix(kv_bound)
            step = compiled_decode_step() if self.compiled else decode_step
            step(self.model, cache, self.buffers, stop, self.spare, sampling, noise, masked)

        if captured:
            # Every row sits out at the spare position while the step is warmed up and recorded.
            self.start.fill_(self.spare)
            self.active.zero_()
            self.generated.zero_()
            self.limit.zero_()
            self.temperature.fill_(1.0)
            self.top_p.fill_(1.0)
            replay = self.capture.capture(run)
            entry = DecodeStep(lambda kv_bound: replay(), noise, stop)
        else:
            entry = DecodeStep(run, noise, stop)
        self._steps[key] = entry
        return entry


@dataclass
class Snapshot:
    """A session's state at one moment, for restore()."""

    cache: ModelCache
    processed: list[int]
    pending: list[list[int]]
    last_logits: torch.Tensor
    random_stream: tuple[int | None, torch.Tensor] | None  # (seed, generator state) of the sampling noise


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
        lengths = [len(row) for row in new]
        if len(set(lengths)) == 1 and self.batch_size > 1:
            self._prefill(list(range(self.batch_size)), new, self.cache)
        elif set(lengths) == {0, 1} and sum(lengths) > 1:
            # Rows that sampled their last token while others sat out: one masked step runs them all.
            self._step_rows([length == 1 for length in lengths], [row[:1] or [0] for row in new])
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

    def _step_rows(self, active: list[bool], tokens: list[list[int]]) -> None:
        """Run one token in each active row, in one step over every row: rows sitting it out keep their states,
        and the KV slot they write at their length is scratch that their next token overwrites."""
        device = self.engine.device
        rows = [i for i, runs in enumerate(active) if runs]
        logits = self.model.forward(
            torch.tensor(tokens, dtype=torch.long, device=device),
            torch.tensor(self._processed, dtype=torch.long, device=device),
            self.cache.prefix(max(self._processed) + 1),
            logits_at=torch.zeros(self.batch_size, dtype=torch.long, device=device),
            active=torch.tensor(active, device=device),
        )
        self._last_logits[rows] = logits[rows]
        for i in rows:
            self._processed[i] += 1
        self.processed_tokens += len(rows)

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
        stop = sorted(stop_ids) or [-1]
        decoder = self._decoder()
        with decoder.lock:
            try:
                step = decoder.step(sampling, _stop_width(len(stop)))
            except RuntimeError as error:
                if not decoder.captured:
                    raise
                self.engine.stop_capturing(error)
                decoder.capture = None  # this call still decodes, eagerly, in the dropped workspace
                step = decoder.step(sampling, _stop_width(len(stop)))
            return self._decode(rows, limit_per_row, sampling, stop, decoder, step)

    def _decode(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop: list[int],
        decoder: Decoder,
        step: DecodeStep,
    ) -> list[list[int]]:
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
        first = sample(
            self._last_logits, sampling, noise, temperature=decoder.temperature, top_p=decoder.top_p
        )
        decoder.tokens.copy_(first)
        decoder.out[:, 0] = first
        decoder.generated.copy_(selected.long())
        decoder.active.copy_(selected & ~is_stop(first, step.stop) & (decoder.generated < decoder.limit))
        for done in range(1, max(limit_per_row)):
            if noise is not None:
                draw_noise(noise, generator)
            step.run(longest + done)
            if done % self.engine.sync_every == 0 and not bool(decoder.active.any()):
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
            self._eager = Decoder(self.model, self.cache, compiled=self.engine.compile_decode)
        return self._eager

    def _generator(self, sampling: SamplingParams) -> torch.Generator:
        """The sampling noise's generator: generate() calls with the same seed continue one stream, so a
        generation split into several calls (to check for cancellation) draws the tokens of a single call."""
        if self._random_stream is None or self._random_stream[0] != sampling.seed:
            self._random_stream = (sampling.seed, make_generator(sampling, self.engine.device))
        return self._random_stream[1]

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

    def clear_row_(self, row: int) -> None:
        """Empty `row` until copy_row_() fills it again (its old state stays behind until then, unread)."""
        self._processed[row] = 0
        self._pending[row] = []

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
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Return every row to the snapshot's state; processed_tokens keeps counting work already done."""
        if len(snapshot.processed) != self.batch_size:
            raise ValueError(f"snapshot has {len(snapshot.processed)} rows, this session {self.batch_size}")
        self.cache.copy_prefix_(snapshot.cache, max(snapshot.processed))
        self._processed = list(snapshot.processed)
        self._pending = [list(p) for p in snapshot.pending]
        self._last_logits.copy_(snapshot.last_logits)
        self._random_stream = None
        if snapshot.random_stream is not None:
            seed, state = snapshot.random_stream
            generator = torch.Generator(device=self.engine.device)
            generator.set_state(state)
            self._random_stream = (seed, generator)

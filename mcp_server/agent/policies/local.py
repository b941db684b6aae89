"""The local engine as a policy: each question's rows live in one batch with the other questions' rows, kept
across turns so each turn prefills only the text appended since the last one; generated token ids stay in the
sequence exactly as sampled."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from mcp_server.agent.chat_format import STOP_TOKENS, ChatFormat
from mcp_server.agent.errors import AgentCancelled, ModelOutOfMemoryError
from mcp_server.agent.policies import MAX_BATCH_ROWS
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.policies.local_batch import BatchScheduler
from mcp_server.agent.prompts import Prompts, load_prompts
from model.engine import Engine
from model.row_pool import Lease
from model.sampling_params import SamplingParams
from model.shared_prefix import SharedPrefix

log = logging.getLogger(__name__)

OUT_OF_MEMORY_HINT = (
    "lower --token-budget or --samples (SQLSCOUT_TOKEN_BUDGET, SQLSCOUT_SAMPLES), free memory on the device, "
    "or serve the model elsewhere and give --endpoint URL"
)


@contextmanager
def out_of_memory_reported(device: torch.device) -> Iterator[None]:
    """Running out of memory ends the question with ModelOutOfMemoryError; the run's caches are freed when it
    closes, so the next question starts with the memory this one held."""
    try:
        yield
    except (torch.cuda.OutOfMemoryError, MemoryError) as error:
        # torch's message goes on to allocator statistics and links; its first sentences say what ran out.
        what = ". ".join(str(error).split(". ")[:2]).strip() or type(error).__name__
        # Its traceback would keep the frames that ran out, and through them their caches, alive for as long
        # as the error is: without it they go when the run closes, before the next question needs the memory.
        raise ModelOutOfMemoryError(
            f"the local model ran out of memory on {device} ({what}): {OUT_OF_MEMORY_HINT}"
        ) from error.with_traceback(None)


class LocalRun:
    """N rows that the policy's scheduler lends this question: the prompt past the system turn is prefilled
    once and copied into each row when the question is admitted, at its first completion; text appended
    between completions is prefilled when the next completion is asked for, together with it."""

    def __init__(self, policy: LocalPolicy, prompt: str, samples: int, max_tokens: int) -> None:
        self._policy = policy
        self._prompt_ids = policy.engine.tokenizer.encode(prompt)
        self.samples = samples
        # A prompt longer than the budget still fits its rows; the episode then ends before generating.
        self._max_tokens = max(max_tokens, len(self._prompt_ids))
        self._lease: Lease | None = None
        self._prompt_processed = 0
        self._unsent: list[list[int]] = [[] for _ in range(samples)]

    def append(self, texts: dict[int, str]) -> None:
        encode = self._policy.engine.tokenizer.encode
        for row, text in texts.items():
            self._unsent[row] += encode(text)

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: threading.Event | None = None,
    ) -> list[Completion]:
        if cancel is not None and cancel.is_set():
            raise AgentCancelled("the question was cancelled")
        started = time.perf_counter()
        scheduler = self._policy.scheduler
        with out_of_memory_reported(self._policy.engine.device):
            if self._lease is None:
                self._lease, self._prompt_processed = scheduler.admit(
                    self._prompt_ids, self.samples, self._max_tokens, cancel
                )
            appends = {row: ids for row, ids in enumerate(self._unsent) if ids}
            self._unsent = [[] for _ in range(self.samples)]
            outputs = scheduler.generate(
                self._lease, appends, rows, max_new_tokens, sampling, self._policy.stop_ids, cancel
            )
        elapsed = time.perf_counter() - started
        return [self._completion(tokens, elapsed) for tokens in outputs]

    def _completion(self, tokens: list[int], elapsed: float) -> Completion:
        tokenizer = self._policy.engine.tokenizer
        stopped = bool(tokens) and tokens[-1] in self._policy.stop_ids
        content = tokens[:-1] if stopped else tokens
        text = tokenizer.decode(content)
        raw = text + (tokenizer.decode(tokens[-1:]) if stopped else "")
        return Completion(text=text, raw=raw, tokens=len(tokens), stopped=stopped, model_s=elapsed)

    def length(self, row: int) -> int:
        held = self._lease.lengths[row] if self._lease is not None else len(self._prompt_ids)
        return held + len(self._unsent[row])

    def count_tokens(self, text: str) -> int:
        return len(self._policy.engine.tokenizer.encode(text))

    @property
    def processed_tokens(self) -> int:
        return self._prompt_processed + (self._lease.processed if self._lease is not None else 0)

    def close(self) -> None:
        """Give the rows back at once, so that the next question in line can have them."""
        if self._lease is not None:
            self._policy.scheduler.release(self._lease)
            self._lease = None


class LocalPolicy:
    """The model directory's checkpoint on this machine's engine."""

    name = "local"

    def __init__(
        self, engine: Engine, prompts: Prompts | None = None, max_batch_rows: int = MAX_BATCH_ROWS
    ) -> None:
        """max_batch_rows: the most rows (episodes of all questions) decoded together; more questions wait."""
        self.engine = engine
        self.prompts = prompts or Prompts()
        self.chat = ChatFormat(engine.tokenizer.render_chat)
        self.stop_ids = {engine.tokenizer.token_id(token) for token in STOP_TOKENS}
        # Every question's prompt opens with the same system turn: its state is computed once, then copied.
        self.system_turn = SharedPrefix(
            engine, engine.tokenizer.encode(self.chat.system_turn(self.prompts.system))
        )
        self.scheduler = BatchScheduler(engine, self.system_turn, max_batch_rows)

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        *,
        device: str | None = None,
        dtype: str | None = None,
        quantize: str | None = None,
        threads: int | None = None,
        cache_dir: Path | None = None,
        max_batch_rows: int = MAX_BATCH_ROWS,
        compile_sampling: SamplingParams | None = None,
    ) -> LocalPolicy:
        """The engine on model_dir; dtype is a torch dtype's name ("bfloat16", "float32"), None for the default.
        With compile_sampling the CPU decode step runs through torch.compile, compiled here for that sampling."""
        engine = Engine.load(
            model_dir,
            device=device,
            dtype=getattr(torch, dtype) if dtype else None,
            quantize=quantize,
            threads=threads,
            cache_dir=cache_dir,
            compile_decode=compile_sampling is not None,
        )
        if compile_sampling is not None:
            log.info("compiling the decode step (minutes the first time, less with the compile cache)")
            started = time.perf_counter()
            engine.warm_up(compile_sampling)
            log.info("decode step compiled in %.0f s", time.perf_counter() - started)
        return cls(engine, load_prompts(model_dir), max_batch_rows)

    def start(self, prompt: str, samples: int, max_tokens: int) -> LocalRun:
        return LocalRun(self, prompt, samples, max_tokens)

    def close(self) -> None:
        pass

"""The local engine as a policy: one session per question, kept across turns so each turn prefills only the
text appended since the last one; generated token ids stay in the sequence exactly as sampled."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from mcp_server.agent.chat_format import STOP_TOKENS, ChatFormat
from mcp_server.agent.errors import AgentCancelled, ModelOutOfMemoryError
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.prompts import Prompts, load_prompts
from model.engine import Engine
from model.sampling_params import SamplingParams
from model.shared_prefix import SharedPrefix

# With a cancel event, decoding runs in chunks of this many tokens and checks the event between them.
CANCEL_CHECK_TOKENS = 256
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
    """N rows on one engine session: a batch-1 prefill of the prompt past the system turn (whose state the
    policy keeps), forked when N > 1."""

    def __init__(self, policy: LocalPolicy, prompt: str, samples: int, max_tokens: int) -> None:
        self._policy = policy
        tokenizer = policy.engine.tokenizer
        prompt_ids = tokenizer.encode(prompt)
        with out_of_memory_reported(policy.engine.device):
            # A prompt longer than the budget still fits its session; the episode then ends before generating.
            root = policy.engine.new_session(1, max(max_tokens, len(prompt_ids)))
            prefilled = policy.system_turn.fill(root, prompt_ids)
            if samples > 1:
                self.session = root.fork(samples)
                self._prefill_processed = prefilled
            else:
                self.session = root
                self._prefill_processed = prefilled - root.processed_tokens
        self.samples = samples

    def append(self, texts: dict[int, str]) -> None:
        if not texts:
            return
        encode = self._policy.engine.tokenizer.encode
        with out_of_memory_reported(self._policy.engine.device):
            if self.samples == 1:
                self.session.append(encode(texts[0]) if 0 in texts else [])
            else:
                self.session.append(
                    [encode(texts[row]) if row in texts else [] for row in range(self.samples)]
                )

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: threading.Event | None = None,
    ) -> list[Completion]:
        started = time.perf_counter()
        stop_ids = self._policy.stop_ids
        generated: dict[int, list[int]] = {row: [] for row in rows}
        left = dict(zip(rows, max_new_tokens, strict=True))
        running = [row for row in rows if left[row] > 0]
        while running:
            if cancel is not None and cancel.is_set():
                raise AgentCancelled("the question was cancelled while the model was writing")
            chunk = [
                min(left[row], CANCEL_CHECK_TOKENS) if cancel is not None else left[row] for row in running
            ]
            with out_of_memory_reported(self._policy.engine.device):
                outputs = self.session.generate(chunk, sampling, stop_ids, rows=running)
            still = []
            for row, tokens in zip(running, outputs, strict=True):
                generated[row] += tokens
                left[row] -= len(tokens)
                if tokens and tokens[-1] not in stop_ids and left[row] > 0:
                    still.append(row)
            running = still
        elapsed = time.perf_counter() - started
        return [self._completion(generated[row], elapsed) for row in rows]

    def _completion(self, tokens: list[int], elapsed: float) -> Completion:
        tokenizer = self._policy.engine.tokenizer
        stopped = bool(tokens) and tokens[-1] in self._policy.stop_ids
        content = tokens[:-1] if stopped else tokens
        text = tokenizer.decode(content)
        raw = text + (tokenizer.decode(tokens[-1:]) if stopped else "")
        return Completion(text=text, raw=raw, tokens=len(tokens), stopped=stopped, model_s=elapsed)

    def length(self, row: int) -> int:
        return self.session.lengths[row]

    def count_tokens(self, text: str) -> int:
        return len(self._policy.engine.tokenizer.encode(text))

    @property
    def processed_tokens(self) -> int:
        return self._prefill_processed + self.session.processed_tokens

    def close(self) -> None:
        self.session = None


class LocalPolicy:
    """The model directory's checkpoint on this machine's engine."""

    name = "local"

    def __init__(self, engine: Engine, prompts: Prompts | None = None) -> None:
        self.engine = engine
        self.prompts = prompts or Prompts()
        self.chat = ChatFormat(engine.tokenizer.render_chat)
        self.stop_ids = {engine.tokenizer.token_id(token) for token in STOP_TOKENS}
        # Every question's prompt opens with the same system turn: its state is computed once, then copied.
        self.system_turn = SharedPrefix(
            engine, engine.tokenizer.encode(self.chat.system_turn(self.prompts.system))
        )

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
    ) -> LocalPolicy:
        """The engine on model_dir; dtype is a torch dtype's name ("bfloat16", "float32"), None for the default."""
        engine = Engine.load(
            model_dir,
            device=device,
            dtype=getattr(torch, dtype) if dtype else None,
            quantize=quantize,
            threads=threads,
            cache_dir=cache_dir,
        )
        return cls(engine, load_prompts(model_dir))

    def start(self, prompt: str, samples: int, max_tokens: int) -> LocalRun:
        return LocalRun(self, prompt, samples, max_tokens)

    def close(self) -> None:
        pass

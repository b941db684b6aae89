"""The local engine as a policy, a thin adapter over the serving layer (model/serving/): each question is one
conversation of the batch scheduler, its texts encoded in and its tokens decoded out; generated token ids stay
in the sequence exactly as sampled."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from mcp_server.agent.chat_format import STOP_TOKENS, ChatFormat
from mcp_server.agent.errors import ModelOutOfMemoryError
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.prompts import Prompts, load_prompts
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent
from model.serving.conversation import Conversation
from model.serving.scheduler import BatchScheduler
from model.serving.shared_prefix import SharedPrefix

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
    """A question's samples as one Conversation of the policy's scheduler: texts in, completions out."""

    def __init__(self, policy: LocalPolicy, prompt: str, samples: int, max_tokens: int) -> None:
        self._policy = policy
        self.samples = samples
        self._conversation = Conversation(
            policy.scheduler, policy.engine.tokenizer.encode(prompt), samples, max_tokens
        )

    def append(self, texts: dict[int, str]) -> None:
        encode = self._policy.engine.tokenizer.encode
        self._conversation.append({row: encode(text) for row, text in texts.items()})

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        started = time.perf_counter()
        with out_of_memory_reported(self._policy.engine.device):
            outputs = self._conversation.generate(
                rows, max_new_tokens, sampling, self._policy.stop_ids, cancel
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
        return self._conversation.length(row)

    def count_tokens(self, text: str) -> int:
        return len(self._policy.engine.tokenizer.encode(text))

    @property
    def processed_tokens(self) -> int:
        return self._conversation.processed_tokens

    def close(self) -> None:
        """Give the rows back at once, so that the next question in line can have them."""
        self._conversation.close()


class LocalPolicy:
    """The model directory's checkpoint on this machine's engine, decoding up to the engine options'
    max_batch_rows rows (episodes of all questions) together; more questions wait."""

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
        self.scheduler = BatchScheduler(engine, self.system_turn, engine.options.max_batch_rows)

    @classmethod
    def load(cls, model_dir: str | Path, options: EngineOptions, sampling: SamplingParams) -> LocalPolicy:
        """The engine on model_dir; with options.compile its CPU decode step is compiled here, for the
        agent's `sampling`."""
        engine = Engine.load(model_dir, options)
        if options.compile:
            log.info("compiling the decode step (minutes the first time, less with the compile cache)")
            started = time.perf_counter()
            engine.warm_up(sampling)
            log.info("decode step compiled in %.0f s", time.perf_counter() - started)
        return cls(engine, load_prompts(model_dir))

    def start(self, prompt: str, samples: int, max_tokens: int) -> LocalRun:
        return LocalRun(self, prompt, samples, max_tokens)

    def close(self) -> None:
        pass

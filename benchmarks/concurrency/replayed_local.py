"""The local engine with replayed completions: every scripted reply costs the engine what generating it would
(one batched decode step per token, stop tokens switched off so that exactly the reply's length is decoded),
and the episode goes on with the scripted text, so that a random checkpoint runs realistic episodes."""

from __future__ import annotations

from collections.abc import Callable

from mcp_server.agent.chat_format import END_OF_TURN
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.policies.local import LocalPolicy, LocalRun
from mcp_server.agent.prompts import Prompts
from model.engine import Engine
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent


class ReplayedLocalRun(LocalRun):
    """A question's rows on the shared batch; each completion decodes as many tokens as its scripted reply."""

    def __init__(self, policy: ReplayedLocalPolicy, prompt: str, samples: int, max_tokens: int) -> None:
        super().__init__(policy, prompt, samples, max_tokens)
        self.script = policy.script_for(prompt)
        self.turn = 0

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        tokenizer = self._policy.engine.tokenizer
        reply = self.script[self.turn] if self.turn < len(self.script) else ""
        self.turn += 1
        ids = tokenizer.encode(reply) + [tokenizer.token_id(END_OF_TURN)]
        limits = [min(len(ids), limit) for limit in max_new_tokens]
        decoded = super().complete(rows, limits, sampling, cancel)
        completions = []
        for done in decoded:
            stopped = done.tokens == len(ids)
            text = tokenizer.decode(ids[: done.tokens - 1] if stopped else ids[: done.tokens])
            raw = text + (END_OF_TURN if stopped else "")
            completions.append(Completion(text, raw, done.tokens, stopped, done.model_s))
        return completions


class ReplayedLocalPolicy(LocalPolicy):
    """LocalPolicy whose runs replay `script_for(prompt)`; the engine never stops a reply early."""

    def __init__(self, engine: Engine, script_for: Callable[[str], list[str]], prompts: Prompts) -> None:
        super().__init__(engine, prompts)
        self.script_for = script_for
        self.stop_ids = set()

    def start(self, prompt: str, samples: int, max_tokens: int) -> ReplayedLocalRun:
        return ReplayedLocalRun(self, prompt, samples, max_tokens)

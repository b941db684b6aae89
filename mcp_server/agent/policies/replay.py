"""Scripted completions: replays given replies turn by turn, for tests and evaluation of recorded episodes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mcp_server.agent.chat_format import ChatFormat, RenderChat
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.prompts import Prompts
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent


class ReplayRun:
    """Rows of growing text; each completion is the row's next scripted reply, cut at its token limit."""

    def __init__(self, policy: ReplayPolicy, prompt: str, samples: int) -> None:
        self._policy = policy
        self.texts = [prompt] * samples
        self.prompts_seen: list[list[str]] = [[] for _ in range(samples)]
        self._turn = [0] * samples

    def append(self, texts: dict[int, str]) -> None:
        for row, text in texts.items():
            self.texts[row] += text

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        completions = []
        for row, limit in zip(rows, max_new_tokens, strict=True):
            self.prompts_seen[row].append(self.texts[row])
            script = self._policy.script_for(row)
            reply = script[self._turn[row]] if self._turn[row] < len(script) else ""
            self._turn[row] += 1
            ids = self._policy.encode(reply)
            stopped = len(ids) <= limit
            if not stopped:
                reply = self._policy.decode(ids[:limit])
            self.texts[row] += reply
            completions.append(Completion(reply, reply, min(len(ids), limit), stopped, 0.0))
        return completions

    def length(self, row: int) -> int:
        return len(self._policy.encode(self.texts[row]))

    def count_tokens(self, text: str) -> int:
        return len(self._policy.encode(text))

    @property
    def processed_tokens(self) -> int | None:
        return None

    def close(self) -> None:
        pass


class ReplayPolicy:
    """Replays `scripts[i]` (a list of replies) as episode i of a run; one script serves every row."""

    name = "replay"

    def __init__(
        self,
        scripts: Sequence[Sequence[str]],
        *,
        encode: Callable[[str], list[int]],
        decode: Callable[[Sequence[int]], str],
        render_chat: RenderChat,
        prompts: Prompts | None = None,
    ) -> None:
        if not scripts:
            raise ValueError("a replay policy needs at least one script of replies")
        self.scripts = [list(s) for s in scripts]
        self.encode, self.decode = encode, decode
        self.chat = ChatFormat(render_chat)
        self.prompts = prompts or Prompts()
        self.runs: list[ReplayRun] = []

    @classmethod
    def with_tokenizer(cls, scripts: Sequence[Sequence[str]], tokenizer, prompts: Prompts | None = None):
        """A replay policy counting tokens with a model tokenizer and rendering with its chat template."""
        return cls(
            scripts,
            encode=tokenizer.encode,
            decode=tokenizer.decode,
            render_chat=tokenizer.render_chat,
            prompts=prompts,
        )

    def script_for(self, row: int) -> list[str]:
        return self.scripts[row] if len(self.scripts) > 1 else self.scripts[0]

    def start(self, prompt: str, samples: int, max_tokens: int) -> ReplayRun:
        if len(self.scripts) > 1 and len(self.scripts) < samples:
            raise ValueError(f"{samples} samples asked for but only {len(self.scripts)} scripts given")
        run = ReplayRun(self, prompt, samples)
        self.runs.append(run)
        return run

    def close(self) -> None:
        pass

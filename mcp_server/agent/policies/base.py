"""What the agent asks of a policy: a growing text per episode, completed turn by turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mcp_server.agent.chat_format import ChatFormat
from mcp_server.agent.prompts import Prompts
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent


@dataclass(frozen=True)
class Completion:
    """One generated turn.

    text: the reply without its stop token; raw: exactly what entered the episode's sequence (the local
    engine keeps the stop token it sampled, so raw may end with `<|im_end|>` or `<|endoftext|>`).
    """

    text: str
    raw: str
    tokens: int
    stopped: bool  # ended at a stop token rather than at its limit
    model_s: float


class PolicyRun(Protocol):
    """N episodes that start from the same prompt and then grow independently (rows 0..N-1)."""

    def append(self, texts: dict[int, str]) -> None:
        """Append raw text to the given rows' sequences."""

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        """Generate the next turn of every given row, together."""

    def length(self, row: int) -> int:
        """Tokens in the row's sequence, including appended text not yet sent to the model."""

    def count_tokens(self, text: str) -> int:
        """Tokens the text will add when appended."""

    @property
    def processed_tokens(self) -> int | None:
        """Tokens the model ran (prefill + decode, all rows), where the policy can know it."""

    def close(self) -> None: ...


class Policy(Protocol):
    """A source of completions with its prompts and chat format."""

    name: str
    prompts: Prompts
    chat: ChatFormat

    def start(self, prompt: str, samples: int, max_tokens: int) -> PolicyRun:
        """Begin `samples` episodes from one prompt; max_tokens bounds each sequence."""

    def close(self) -> None: ...

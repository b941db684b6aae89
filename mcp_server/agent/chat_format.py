"""ChatML pieces of an episode: the first prompt from the chat template, then the raw text appended per turn."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

START_OF_TURN = "<|im_start|>"
END_OF_TURN = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
STOP_TOKENS = (END_OF_TURN, END_OF_TEXT)

# Qwen3.5's generation prompt with thinking on; used only when no chat template is available.
DEFAULT_ASSISTANT_HEADER = "<|im_start|>assistant\n<think>\n"

RenderChat = Callable[..., str]


def render_chatml(
    messages: list[dict], *, add_generation_prompt: bool = True, enable_thinking: bool = True
) -> str:
    """Plain ChatML with Qwen3.5's thinking header, for endpoints used without a local tokenizer."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}{END_OF_TURN}\n" for m in messages)
    if add_generation_prompt:
        text += (
            DEFAULT_ASSISTANT_HEADER if enable_thinking else "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        )
    return text


@dataclass
class ChatFormat:
    """How an episode's text grows: first prompt by the template, later turns by appending raw text."""

    render_chat: RenderChat

    def first_prompt(self, system: str, user: str) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.render_chat(messages, add_generation_prompt=True, enable_thinking=True)

    def system_turn(self, system: str) -> str:
        """The text every first prompt with this system prompt starts with, up to the user turn's opening
        `<|im_start|>`: a special token, so this text tokenizes alone as it does at the start of any prompt."""
        prompts = [self.first_prompt(system, user) for user in ("a", "b")]
        shared = os.path.commonprefix(prompts)
        return shared[: max(shared.rfind(START_OF_TURN), 0)]

    @cached_property
    def assistant_header(self) -> str:
        """The template's generation prompt, so that every later turn opens exactly like the first."""
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        with_header = self.render_chat(messages, add_generation_prompt=True, enable_thinking=True)
        without = self.render_chat(messages, add_generation_prompt=False, enable_thinking=True)
        if with_header.startswith(without) and len(with_header) > len(without):
            return with_header[len(without) :]
        return DEFAULT_ASSISTANT_HEADER

    @cached_property
    def thinking_open(self) -> bool:
        """Whether the assistant header itself opens the `<think>` block."""
        header = self.assistant_header
        return header.rstrip().endswith("<think>")

    def next_turn(self, completion_raw: str, user_content: str) -> str:
        """What follows a completion: its end-of-turn token (unless the completion already ends with it),
        the user turn, and the next assistant header."""
        closing = "" if completion_raw.endswith(END_OF_TURN) else END_OF_TURN
        return f"{closing}\n<|im_start|>user\n{user_content}{END_OF_TURN}\n{self.assistant_header}"

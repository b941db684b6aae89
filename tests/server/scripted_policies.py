"""Scripted policies for driving questions through the server: a byte-counting replay, and one whose
completions wait for a gate so that tests can hold questions in flight."""

from __future__ import annotations

import threading

from mcp_server.agent.chat_format import render_chatml
from mcp_server.agent.policies.replay import ReplayPolicy
from model.serving.cancel import Cancelled

SCRIPT = [
    'Look around first.</think>\n{"tool": "list_tables", "args": {}}\n'
    '{"tool": "run_query", "args": {"sql": "SELECT COUNT(*) FROM orders"}}',
    "The orders table has a status.</think>\n"
    '{"tool": "submit_sql", "args": {"sql": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY status"}}',
]


def byte_replay(script: list[str]) -> ReplayPolicy:
    """Replays `script`, counting one token per byte."""
    return ReplayPolicy(
        [script],
        encode=lambda text: list(text.encode()),
        decode=lambda ids: bytes(ids).decode(errors="ignore"),
        render_chat=render_chatml,
    )


class GatedPolicy:
    """A replay policy whose every completion waits for a gate (or a cancel); it records the prompts of the
    runs in the order they started and the most completions in progress at once."""

    def __init__(self, script: list[str]) -> None:
        self.inner = byte_replay(script)
        self.name, self.prompts, self.chat = "gated", self.inner.prompts, self.inner.chat
        self.gate = threading.Event()
        self.saw_cancel = threading.Event()
        self.started: list[str] = []
        self.active = 0
        self.most_active = 0
        self._count_lock = threading.Lock()

    def start(self, prompt: str, samples: int, max_tokens: int):
        with self._count_lock:
            self.started.append(prompt)
        run = self.inner.start(prompt, samples, max_tokens)
        policy = self
        original = run.complete

        def complete(rows, max_new_tokens, sampling, cancel=None):
            with policy._count_lock:
                policy.active += 1
                policy.most_active = max(policy.most_active, policy.active)
            try:
                while not policy.gate.wait(0.02):
                    if cancel is not None and cancel.is_set():
                        policy.saw_cancel.set()
                        raise Cancelled("cancelled while writing")
                return original(rows, max_new_tokens, sampling, cancel)
            finally:
                with policy._count_lock:
                    policy.active -= 1

        run.complete = complete
        return run

    def close(self) -> None:
        pass

"""The state after a prefix that every sequence shares (the agent's system prompt), computed once per engine
and copied into each new sequence that starts with it, so that a sequence prefills only what follows."""

from __future__ import annotations

import threading

import torch

from model.engine import Engine
from model.session import Session


class SharedPrefix:
    """A batch-1 session holding `ids`, prefilled on first use."""

    def __init__(self, engine: Engine, ids: list[int]) -> None:
        self.engine = engine
        self.ids = list(ids)
        self._session: Session | None = None
        self._lock = threading.Lock()

    def matches(self, ids: list[int]) -> bool:
        """Whether `ids` starts with the prefix and goes on past it (the prefix alone leaves nothing to run)."""
        return bool(self.ids) and len(ids) > len(self.ids) and ids[: len(self.ids)] == self.ids

    @torch.inference_mode()
    def fill(self, session: Session, ids: list[int]) -> int:
        """Put `ids` into an empty batch-1 session: the prefix's state is copied in when ids start with it, and
        the rest prefilled. Returns the tokens run through the model for it, the prefix's own the first time it
        is needed."""
        if session.batch_size != 1:
            raise ValueError(f"fill() takes a batch-1 session, this one has {session.batch_size} rows")
        if not self.matches(ids):
            session.append(ids)
            return len(ids)
        computed = self._computed()
        session.copy_row_(0, self._session)
        session.append(ids[len(self.ids) :])
        return computed + len(ids) - len(self.ids)

    def _computed(self) -> int:
        """Prefill the prefix unless that is done; returns the tokens this call ran."""
        with self._lock:
            if self._session is not None:
                return 0
            session = self.engine.new_session(1, len(self.ids))
            session.append(self.ids)
            self._session = session
            return len(self.ids)

"""Drafts from the context, costing no model: the tokens that followed the last n-gram (longest first, n from
MAX_NGRAM down to 1) where it occurred before, in the row's own sequence or else in the engine's recent
sequences of other episodes (an agent repeats its own call patterns across questions)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_NGRAM = 4
# The most tokens a match of n = 1, 2, 3 tokens proposes (MAX_NGRAM tokens: the caller's limit): a short match
# predicts little, and each drafted token costs the verify pass a row of every product.
DRAFT_TOKENS_BY_MATCH = (1, 2, 4)
# Tokens the recent sequences keep (older ones are dropped half at a time): a few hundred episodes' replies.
RECENT_TOKENS = 262_144
# What separates two recent sequences, so that no n-gram spans both.
_SEPARATOR = -1


@dataclass(frozen=True)
class Draft:
    """Tokens proposed to follow a row's sequence, and what proposed them: the length of the n-gram matched
    (DRAFT_HEAD_KIND for the MTP head), whose acceptance the draft budget keeps apart."""

    tokens: list[int]
    kind: int


DRAFT_HEAD_KIND = 0
NO_DRAFT = Draft([], 0)


class NgramIndex:
    """A token sequence and, for each n-gram length, where the continuation of each n-gram's latest earlier
    occurrence starts (the current suffix itself is not indexed until a token follows it)."""

    def __init__(self, tokens: list[int] | None = None) -> None:
        self.tokens: list[int] = []
        self._continuations: list[dict[tuple[int, ...], int]] = [{} for _ in range(MAX_NGRAM)]
        self.extend(tokens or [])

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, new: list[int]) -> None:
        tokens = self.tokens
        for token in new:
            end = len(tokens)
            # The n-grams that end just before `token` now have a continuation: it starts at `end`.
            for n in range(1, min(MAX_NGRAM, end) + 1):
                gram = tuple(tokens[end - n : end])
                if _SEPARATOR not in gram:
                    self._continuations[n - 1][gram] = end
            tokens.append(token)

    def continuation(self, gram: tuple[int, ...]) -> int | None:
        """Where the tokens after gram's latest earlier occurrence start, if it occurred."""
        return self._continuations[len(gram) - 1].get(gram)

    def copy(self) -> NgramIndex:
        twin = NgramIndex.__new__(NgramIndex)
        twin.tokens = list(self.tokens)
        twin._continuations = [dict(table) for table in self._continuations]
        return twin


class RecentSequences:
    """A bounded index over the text of recent generations, shared by every session of an engine."""

    def __init__(self, capacity: int = RECENT_TOKENS) -> None:
        self.capacity = capacity
        self._index = NgramIndex()
        self._lock = threading.Lock()

    def add(self, tokens: list[int]) -> None:
        """Index one generation (with the few tokens before it, so that its start can be found)."""
        if not tokens:
            return
        with self._lock:
            if len(self._index) + len(tokens) + 1 > self.capacity:
                kept = self._index.tokens[len(self._index) // 2 :]
                self._index = NgramIndex(kept[kept.index(_SEPARATOR) + 1 :] if _SEPARATOR in kept else [])
            self._index.extend([*tokens[-self.capacity // 2 :], _SEPARATOR])

    def draft(self, gram: tuple[int, ...], limit: int) -> list[int]:
        with self._lock:
            start = self._index.continuation(gram)
            if start is None:
                return []
            follow = self._index.tokens[start : start + limit]
        return follow[: follow.index(_SEPARATOR)] if _SEPARATOR in follow else follow


class NgramDrafter:
    """Proposes up to `limit` tokens to follow a row's sequence (fewer after a short match); nothing when no
    n-gram matches."""

    name = "ngram"

    def __init__(self, recent: RecentSequences | None = None) -> None:
        self.recent = RecentSequences() if recent is None else recent

    def draft(self, text: NgramIndex, limit: int) -> Draft:
        tokens = text.tokens
        for n in range(min(MAX_NGRAM, len(tokens)), 0, -1):
            gram = tuple(tokens[-n:])
            longest = min(limit, DRAFT_TOKENS_BY_MATCH[n - 1]) if n < MAX_NGRAM else limit
            start = text.continuation(gram)
            follow = (
                tokens[start : start + longest] if start is not None else self.recent.draft(gram, longest)
            )
            if follow:
                return Draft(follow, n)
        return NO_DRAFT

    def finished(self, generated: list[int], before: list[int]) -> None:
        """Remember a generation and the MAX_NGRAM tokens before it for other sequences' drafts."""
        self.recent.add([*before[-MAX_NGRAM:], *generated])

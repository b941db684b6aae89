"""How many drafted tokens a verify pass should check, from what passes have cost and accepted so far: a drafted
token pays only where it is likely to be accepted and the pass that checks it costs little more than a step.

A verify pass's cost depends on the machine (on a CPU whose products are compute-bound past one row, each
drafted token costs a large part of a step) and acceptance on the text and the kind of draft (a long n-gram
match is right far more often than a one-token one). Both are measured as the engine runs: seconds per forward
pass by its width (tokens per row), and per kind of draft how often a drafted token is accepted once the one
before it was. A row's draft is cut to the length that gives the most tokens per second, none when even one
does not pay; a declined kind is tried again every EXPLORE_EVERY declines, so that a change of text is seen.
"""

from __future__ import annotations

import threading

# Weight of the newest measurement in the running averages.
SMOOTHING = 0.1
EXPLORE_EVERY = 16
# Until a width is measured, a pass is assumed to cost this much more per extra token than a step: optimistic,
# so that drafting is tried, and corrected by the first measurements.
ASSUMED_EXTRA_PER_TOKEN = 0.1


class DraftBudget:
    """Running costs and acceptance of one engine's verify passes (its sessions share them). Costs are kept per
    session batch size, since rows share a pass."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._seconds: dict[tuple[int, int], float] = {}  # (batch size, pass width) -> running mean seconds
        self._accepted: dict[int, list[float]] = {}  # draft kind -> [accepted tokens, rejections]
        self._declined: dict[int, int] = {}
        self._lock = threading.Lock()

    def cost(self, batch: int, width: int) -> float | None:
        """Seconds a forward pass of `width` tokens per row is expected to take; None before a plain step of this
        batch size was measured. Unmeasured widths: linear through the nearest measured ones, or an optimistic
        ASSUMED_EXTRA_PER_TOKEN past the widest."""
        step = self._seconds.get((batch, 1))
        if step is None:
            return None
        measured = self._seconds.get((batch, width))
        if measured is not None:
            return measured
        below = max(w for (b, w) in self._seconds if b == batch and w < width)
        above = min((w for (b, w) in self._seconds if b == batch and w > width), default=None)
        low = self._seconds[(batch, below)]
        if above is None:
            return low + step * ASSUMED_EXTRA_PER_TOKEN * (width - below)
        high = self._seconds[(batch, above)]
        return low + (high - low) * (width - below) / (above - below)

    def acceptance(self, kind: int) -> float:
        """The chance that a drafted token of this kind is accepted once the one before it was (a prior of 1/2)."""
        accepted, rejected = self._accepted.get(kind, (0.0, 0.0))
        return (accepted + 1.0) / (accepted + rejected + 2.0)

    def length(self, batch: int, kind: int, available: int) -> int:
        """How many of `available` drafted tokens of this kind to check in a session of `batch` rows: the count
        with the most expected tokens per second of the pass, 0 when a plain step does better or has not been
        measured yet."""
        with self._lock:
            step = self.cost(batch, 1)
            if step is None or available == 0:
                return 0
            chance = self.acceptance(kind)
            best, best_rate, expected = 0, 1.0 / step, 1.0
            for length in range(1, min(available, self.max_tokens) + 1):
                expected += chance**length
                rate = expected / self.cost(batch, length + 1)
                if rate > best_rate:
                    best, best_rate = length, rate
            if best == 0:
                declined = self._declined.get(kind, 0) + 1
                self._declined[kind] = declined % EXPLORE_EVERY
                if declined == EXPLORE_EVERY:
                    return min(available, self.max_tokens)
            return best

    def record_pass(self, batch: int, width: int, seconds: float) -> None:
        with self._lock:
            key = (batch, width)
            previous = self._seconds.get(key)
            self._seconds[key] = seconds if previous is None else previous + SMOOTHING * (seconds - previous)

    def record_draft(self, kind: int, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens of which the first `accepted` were accepted."""
        if drafted == 0:
            return
        with self._lock:
            counts = self._accepted.setdefault(kind, [0.0, 0.0])
            # Decayed counts: the last few hundred drafts decide.
            counts[0] = counts[0] * (1 - SMOOTHING / 10) + accepted
            counts[1] = counts[1] * (1 - SMOOTHING / 10) + (1 if accepted < drafted else 0)

"""Sampling settings, kept free of torch so that callers that only pass them along start fast."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingParams:
    """temperature 0 is greedy; top_k <= 0 and top_p >= 1 switch those filters off; seed makes runs repeatable."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # NaN fails too
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

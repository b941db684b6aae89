"""Sampling settings, kept free of torch so that callers that only pass them along start fast; their defaults
(the trained ones) and their checks live here only."""

from __future__ import annotations

from dataclasses import dataclass

from model.errors import OptionError


@dataclass
class SamplingParams:
    """temperature 0 is greedy; top_k 0 and top_p 1 switch those filters off; seed makes runs repeatable."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # NaN fails too
            raise OptionError("temperature", f"must be >= 0, not {self.temperature:g}")
        if not 0 < self.top_p <= 1:
            raise OptionError("top_p", f"must be in (0, 1], not {self.top_p:g}")
        if self.top_k < 0:
            raise OptionError("top_k", f"must be >= 0, not {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

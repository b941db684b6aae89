"""The limits every query runs under (statement timeout, row cap, character cap) and their defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class QueryLimits:
    """A query's statement timeout in seconds, and the most rows and characters its result keeps."""

    timeout_s: float = 10.0
    max_rows: int = 1000
    max_chars: int = 100_000

    def __post_init__(self) -> None:
        timeout_expires = math.isfinite(self.timeout_s) and self.timeout_s > 0  # NaN and infinity never do
        if not timeout_expires or self.max_rows < 1 or self.max_chars < 1:
            raise ValueError("timeout_s, max_rows and max_chars must be positive")


# What the engines, `python -m dbtools`, the server's settings and the agent use unless told otherwise.
DEFAULT_QUERY_LIMITS = QueryLimits()

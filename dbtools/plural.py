"""Counts as the tools and commands print them: "1 row", "2 rows"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one; `plural` defaults to the noun plus "s"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"

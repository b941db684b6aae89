"""One evaluation question, whatever set it came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalQuestion:
    """A question with its gold SQL and the database both run against (None: the bundled demo database)."""

    question_id: str
    question: str
    gold_sql: str
    database: str | None
    evidence: str | None = None
    difficulty: str = "unknown"

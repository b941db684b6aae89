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
    # The gold result the dataset recorded (SQaLe's execution_result), to check the rebuilt database against.
    recorded_rows: tuple[tuple, ...] | None = None

"""The record of an episode: every round with its reasoning, calls, tokens and time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class CallRecord:
    """One tool call as the model wrote it and what it returned."""

    tool: str
    args: dict
    output: str
    tables: list[str]
    error: str | None = None
    sql: str | None = None  # the model's SQL (SQLite dialect) for SQL-carrying calls
    executed_sql: str | None = None  # what ran, in the database's dialect (differs on PostgreSQL)
    db_ms: float = 0.0


@dataclass
class RoundRecord:
    """One assistant turn: `tool` (exploration), `answer` (the forced final turn)."""

    index: int
    kind: str
    reasoning: str
    reply: str  # the text after the reasoning
    calls: list[CallRecord] = field(default_factory=list)
    malformed_calls: int = 0
    appended_tokens: int = 0  # tokens appended before this turn (the first prompt for round 1)
    generated_tokens: int = 0
    stopped: bool = True  # False when the turn was cut at its token limit
    model_ms: float = 0.0
    db_ms: float = 0.0


@dataclass
class EpisodeTrace:
    """Everything an episode did; `length` counts every token of its sequence."""

    rounds: list[RoundRecord] = field(default_factory=list)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    length: int = 0
    limit: str | None = None  # what ended exploration: rounds, failed_queries, tokens, or None
    final_sql_source: str | None = None  # the model's final SQL before any fallback
    final_db_ms: float = 0.0  # running the final SQL (and its fallback)

    def to_dict(self) -> dict:
        return asdict(self)

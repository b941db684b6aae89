"""Score one finished episode: run the gold and predicted queries, and read grounding measures off the trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.eval.datasets import EvalQuestion
from benchmarks.eval.gold import gold_literals, gold_tables, literal_seen, table_key
from benchmarks.eval.scoring import results_match
from dbtools.engines import Database
from dbtools.errors import DatabaseToolError

# Scoring compares whole results, so it runs without the agent's row and character caps.
SCORING_MAX_ROWS = 1_000_000
SCORING_MAX_CHARS = 1_000_000_000


@dataclass(frozen=True)
class Execution:
    """A query's full result rows, or why there are none."""

    rows: list[tuple] | None
    error: str | None


def execute_for_scoring(db: Database, sql: str | None, timeout_s: float) -> Execution:
    """Run a query for scoring; a failure, a timeout or a result too large to compare becomes an error."""
    if not sql or not sql.strip():
        return Execution(None, "no SQL")
    try:
        result = db.query(sql, max_rows=SCORING_MAX_ROWS, timeout_s=timeout_s)
    except DatabaseToolError as error:
        return Execution(None, str(error))
    if result.truncated:
        return Execution(None, f"result too large to score: {result.truncation}")
    return Execution([tuple(row) for row in result.rows], None)


def trace_calls(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool call of an episode trace, in order."""
    return [call for round_ in trace.get("rounds", []) for call in round_.get("calls", [])]


def score_episode(
    question: EvalQuestion,
    answer: dict[str, Any],
    *,
    db: Database,
    gold: Execution,
    latency_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    """The episode record of the trace file: the answer, its score and the measures the report aggregates.

    correct is None when the gold query failed: such a question is reported, not scored.
    """
    predicted = execute_for_scoring(db, answer.get("sql"), timeout_s)
    correct = None if gold.error else (predicted.error is None and results_match(predicted.rows, gold.rows))
    trace = answer.get("trace") or {}
    calls = trace_calls(trace)
    # A submission shows the model nothing: only the calls before it count as opening tables or seeing values.
    explored = [call for call in calls if call.get("tool") != "submit_sql"]
    touched = {table_key(t) for call in explored for t in call.get("tables", [])}
    needed = gold_tables(question.gold_sql, db.dialect)
    outputs = "\n".join(call.get("output", "") for call in explored)
    literals = gold_literals(question.gold_sql, db.dialect)
    rounds = trace.get("rounds", [])
    return {
        "question_id": question.question_id,
        "difficulty": question.difficulty,
        "question": question.question,
        "evidence": question.evidence,
        "database": db.display_name,
        "gold_sql": question.gold_sql,
        "predicted_sql": answer.get("sql"),
        "ending": answer.get("ending") or "unknown",
        "votes": answer.get("votes"),
        "correct": correct,
        "gold_error": gold.error,
        # Whether the rebuilt database gives the gold result the dataset recorded (None: nothing recorded).
        "gold_matches_recorded": (
            None
            if question.recorded_rows is None or gold.error
            else results_match(gold.rows, question.recorded_rows)
        ),
        "predicted_error": predicted.error,
        "rounds": len(rounds),
        "tool_calls": len(calls),
        "gold_tables": sorted(needed),
        "tables_touched": sorted(touched),
        "opened_gold_tables": needed <= touched,
        "gold_literals": literals,
        "literals_seen": [literal for literal in literals if literal_seen(literal, outputs)],
        "tokens": {
            "prompt": trace.get("prompt_tokens", 0),
            "generated": trace.get("generated_tokens", 0),
            "sequence": trace.get("length", 0),
        },
        "latency_s": latency_s,
        "model_s": sum(r.get("model_ms", 0.0) for r in rounds) / 1000,
        "db_s": sum(r.get("db_ms", 0.0) for r in rounds) / 1000,
        "trace": trace,
    }

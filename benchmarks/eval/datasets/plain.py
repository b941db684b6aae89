"""The plain JSON-lines format: question, evidence, gold_sql, database (path or DSN), difficulty."""

from __future__ import annotations

from pathlib import Path

from benchmarks.eval.datasets.question import EvalQuestion
from benchmarks.eval.datasets.records import read_records


def load_plain(path: str | Path, *, limit: int | None = None) -> list[EvalQuestion]:
    """Questions from a JSON-lines file; a relative database path is taken from the file's folder and an
    absent database means the bundled demo database."""
    path = Path(path)
    questions = []
    for index, record in enumerate(read_records(path)):
        if limit is not None and index >= limit:
            break
        for field in ("question", "gold_sql"):
            if not record.get(field):
                raise ValueError(f"{path}: record {index + 1} has no {field!r}")
        questions.append(
            EvalQuestion(
                question_id=str(record.get("question_id", index)),
                question=record["question"],
                gold_sql=record["gold_sql"],
                database=_resolve(record.get("database"), path.parent),
                evidence=record.get("evidence") or None,
                difficulty=record.get("difficulty") or "unknown",
            )
        )
    return questions


def _resolve(database: str | None, base: Path) -> str | None:
    """Relative SQLite paths are resolved against the question file; DSNs and absolute paths pass through."""
    if not database or "://" in database or "=" in database or Path(database).is_absolute():
        return database or None
    return str(base / database)

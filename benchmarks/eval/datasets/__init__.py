"""Readers for the evaluation question sets: SQaLe records, BIRD dev, and plain JSON lines."""

from __future__ import annotations

from pathlib import Path

from benchmarks.eval.datasets.bird import load_bird
from benchmarks.eval.datasets.plain import load_plain
from benchmarks.eval.datasets.question import EvalQuestion
from benchmarks.eval.datasets.sqale import DEFAULT_PHRASING, load_sqale
from dbtools.cache import cache_dir as dbtools_cache_dir

FORMATS = ("plain", "sqale", "bird")
DEMO_QUESTIONS = Path(__file__).resolve().parent.parent / "questions" / "demo.jsonl"


def load_questions(
    fmt: str,
    questions: str | Path | None = None,
    *,
    schemas: str | Path | None = None,
    db_root: str | Path | None = None,
    cache_dir: str | Path | None = None,
    phrasing: str = DEFAULT_PHRASING,
    limit: int | None = None,
) -> list[EvalQuestion]:
    """Load a question set of the given format; the plain format defaults to the demo question set."""
    if fmt == "plain":
        return load_plain(questions or DEMO_QUESTIONS, limit=limit)
    if questions is None:
        raise ValueError(f"--questions is required for the {fmt} format")
    if fmt == "bird":
        return load_bird(questions, databases_dir=db_root, limit=limit)
    if fmt == "sqale":
        if cache_dir is None:
            cache_dir = dbtools_cache_dir() / "sqale"
        return load_sqale(questions, schemas, cache_dir=cache_dir, phrasing=phrasing, limit=limit)
    raise ValueError(f"unknown question format {fmt!r}; choose one of {', '.join(FORMATS)}")


__all__ = ["DEMO_QUESTIONS", "FORMATS", "EvalQuestion", "load_questions"]

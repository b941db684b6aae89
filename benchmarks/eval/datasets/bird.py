"""BIRD's dev format: dev.json beside dev_databases/<db_id>/<db_id>.sqlite."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.eval.datasets.question import EvalQuestion


def load_bird(
    dev_json: str | Path, *, databases_dir: str | Path | None = None, limit: int | None = None
) -> list[EvalQuestion]:
    """BIRD questions in file order; databases_dir defaults to dev_databases/ beside dev.json."""
    dev_json = Path(dev_json)
    if not dev_json.exists():
        raise FileNotFoundError(f"BIRD question file not found: {dev_json}")
    root = Path(databases_dir) if databases_dir else dev_json.parent / "dev_databases"
    entries = json.loads(dev_json.read_text(encoding="utf-8"))
    questions = []
    for index, entry in enumerate(entries[:limit] if limit is not None else entries):
        db_id = entry["db_id"]
        database = root / db_id / f"{db_id}.sqlite"
        if not database.exists():
            raise FileNotFoundError(f"BIRD database {db_id!r} not found at {database}; pass --db-root")
        questions.append(
            EvalQuestion(
                question_id=str(entry.get("question_id", index)),
                question=entry["question"],
                gold_sql=entry["SQL"],
                database=str(database),
                evidence=entry.get("evidence") or None,
                difficulty=entry.get("difficulty") or "unknown",
            )
        )
    return questions

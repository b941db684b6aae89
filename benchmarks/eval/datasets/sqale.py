"""SQaLe question and schema records (parquet or JSON lines) as evaluation questions on built SQLite files."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from benchmarks.eval.datasets.question import EvalQuestion
from benchmarks.eval.datasets.records import json_field, read_records
from benchmarks.eval.datasets.sqale_build import sqale_database

DEFAULT_PHRASING = "verbose"


def load_sqale(
    questions_path: str | Path,
    schemas_path: str | Path | None,
    *,
    cache_dir: str | Path,
    phrasing: str = DEFAULT_PHRASING,
    limit: int | None = None,
) -> list[EvalQuestion]:
    """The first `limit` questions in the chosen phrasing, each on its schema's database (built once).

    Without schemas_path the question records must carry their schema (full_schema, schema_content) themselves.
    """
    records = []
    for record in read_records(questions_path):
        if limit is not None and len(records) >= limit:
            break
        records.append(record)
    schema_ids = {record["schema_id"] for record in records}
    if schemas_path is None:
        if not all("full_schema" in record for record in records):
            raise ValueError(
                f"{questions_path}: the question records carry no full_schema; give the schemas dataset (--schemas)"
            )
        schemas = list({record["schema_id"]: record for record in records}.values())
    else:
        schemas = read_records(schemas_path, where=("schema_id", schema_ids))
    databases = {schema["schema_id"]: str(sqale_database(schema, cache_dir)) for schema in schemas}
    missing = schema_ids - databases.keys()
    if missing:
        raise ValueError(
            f"{schemas_path}: no schema record for schema_id {', '.join(map(str, sorted(missing)))}"
        )
    return [
        EvalQuestion(
            question_id=str(record["question_id"]),
            question=_phrasing(record, phrasing),
            gold_sql=record["sql"],
            database=databases[record["schema_id"]],
            evidence=record.get("evidence") or None,
            difficulty=str(record.get("difficulty") or "unknown"),
            recorded_rows=_recorded_rows(record.get("execution_result")),
        )
        for record in records
    ]


def _recorded_rows(value: object) -> tuple[tuple, ...] | None:
    """execution_result as rows when it reads as a list of rows (JSON or Python literal text); else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(row, (list, tuple)) for row in value):
        return None
    return tuple(tuple(row) for row in value)


def _phrasing(record: dict, phrasing: str) -> str:
    source = f"question {record.get('question_id')}"
    phrasings = json_field(record, "questions", source)
    text = phrasings.get(phrasing) if isinstance(phrasings, dict) else None
    if not text:
        available = (
            ", ".join(sorted(k for k, v in phrasings.items() if v)) if isinstance(phrasings, dict) else "none"
        )
        raise ValueError(f"{source} has no {phrasing!r} phrasing; choose --phrasing from: {available}")
    return text

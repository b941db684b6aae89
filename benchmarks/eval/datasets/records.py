"""Read dataset records from parquet or JSON lines, optionally only those with a field in a set of values."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any


def read_records(
    path: str | Path, *, where: tuple[str, Collection] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield records from a .parquet file (pyarrow) or a JSON-lines file, in file order.

    where=(field, values) keeps the records whose field is one of values; for parquet the filter is pushed
    down to the reader, so a few schemas can be read from the full schemas dataset without loading it.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    if path.suffix == ".parquet":
        yield from _parquet_records(path, where)
        return
    for record in _jsonl_records(path):
        if where is None or record.get(where[0]) in where[1]:
            yield record


def _parquet_records(path: Path, where: tuple[str, Collection] | None) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError(
            "reading parquet needs pyarrow: pip install -c constraints.txt '.[eval]' in the sqlscout checkout"
        ) from error
    if where is None:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            yield from batch.to_pylist()
        return
    field, values = where
    yield from pq.read_table(path, filters=[(field, "in", list(values))]).to_pylist()


def _jsonl_records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not a JSON object ({error.msg})") from error


def json_field(record: dict, name: str, source: str) -> Any:
    """A field that may be stored as JSON text (JSON lines, some parquet exports) or already decoded."""
    if name not in record:
        raise ValueError(f"{source}: record has no field {name!r} (fields: {', '.join(sorted(record))})")
    value = record[name]
    return json.loads(value) if isinstance(value, str) else value

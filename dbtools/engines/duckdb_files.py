"""CSV, Parquet and JSON files as DuckDB views: one view per file, named after it, kept in a catalog file of their
own so that DuckDB can open it read-only."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from dbtools.engines.dsn import is_data_file
from dbtools.errors import ConnectionFailedError, first_line

_COMPRESSION = (".gz", ".zst")


def data_files(target: Path) -> list[Path]:
    """The data files `target` names: the file itself, or the data files directly inside the folder, by name."""
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.is_file() and is_data_file(p))
        if not files:
            raise ConnectionFailedError(f"{target} holds no CSV, TSV, Parquet or JSON files")
        return files
    if not target.is_file():
        raise ConnectionFailedError(f"no file or folder at {target}: check the path in --dsn")
    return [target]


def view_names(files: list[Path]) -> dict[str, Path]:
    """Each file's view name: its name without the data and compression suffixes ("sales.csv.gz" -> "sales"); files
    whose names would clash keep their format too ("sales_csv", "sales_parquet")."""
    stems = {path: _strip_suffixes(path.name) for path in files}
    clashing = {s for s in stems.values() if list(stems.values()).count(s) > 1}
    names: dict[str, Path] = {}
    for path, stem in stems.items():
        name = stem
        if stem in clashing:
            name = re.sub(r"\W", "_", path.name.lower().removesuffix(".gz").removesuffix(".zst"))
        names[name] = path
    return names


def _strip_suffixes(name: str) -> str:
    for suffix in _COMPRESSION:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name.rsplit(".", 1)[0]


def _reader(path: Path) -> str:
    """The DuckDB table function that reads `path`, with the path as a string literal."""
    kind = path.name.lower().removesuffix(".gz").removesuffix(".zst").rsplit(".", 1)[-1]
    function = {
        "parquet": "read_parquet",
        "json": "read_json",
        "jsonl": "read_json",
        "ndjson": "read_json",
    }.get(kind, "read_csv")
    return f"{function}('{str(path).replace(chr(39), chr(39) * 2)}')"


def write_views_catalog(catalog: Path, views: dict[str, Path]) -> None:
    """Write a DuckDB database at `catalog` holding one view per file; a file DuckDB cannot read is named."""
    with duckdb.connect(str(catalog)) as conn:
        for name, path in views.items():
            quoted = '"' + name.replace('"', '""') + '"'
            try:
                conn.execute(f"CREATE VIEW {quoted} AS SELECT * FROM {_reader(path)}")
            except duckdb.Error as exc:
                raise ConnectionFailedError(f"cannot read {path} with DuckDB: {first_line(exc)}") from None

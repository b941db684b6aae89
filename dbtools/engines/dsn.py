"""Parse a DSN into the engine it names: a SQLite path or `sqlite:///` URL, a PostgreSQL URL or libpq string, a
MySQL/MariaDB URL, or DuckDB (a `.duckdb` file, data files, a folder of them, or a `duckdb:///` URL)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dbtools.errors import ConnectionFailedError

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_MYSQL_SCHEMES = ("mysql://", "mariadb://")
_LIBPQ_KEYWORD = re.compile(r"^\s*\w+\s*=")
DUCKDB_SUFFIXES = (".duckdb", ".ddb")
# Files DuckDB reads as tables, compressed or not.
DATA_FILE_SUFFIXES = (".csv", ".tsv", ".parquet", ".json", ".jsonl", ".ndjson")
_SUPPORTED = (
    "a SQLite or DuckDB file, CSV/Parquet/JSON files or a folder of them, postgresql://... or mysql://..."
)


@dataclass(frozen=True)
class ParsedDsn:
    engine: str  # "sqlite" | "postgres" | "mysql" | "duckdb"
    target: str  # SQLite, DuckDB: a file or folder path; PostgreSQL: the conninfo string for libpq; MySQL: the URL
    display_name: str  # the DSN with any password masked


def parse_dsn(dsn: str) -> ParsedDsn:
    """Tell the engines apart; raise ConnectionFailedError for a DSN that names none of them."""
    text = dsn.strip()
    if not text:
        raise ConnectionFailedError(f"empty DSN: give {_SUPPORTED}")
    lowered = text.lower()
    if lowered.startswith("sqlite:"):
        path = _file_url_path(text, "sqlite", "file.sqlite")
        return ParsedDsn("sqlite", path, f"sqlite:///{path}")
    if lowered.startswith("duckdb:"):
        path = _file_url_path(text, "duckdb", "file.duckdb")
        return ParsedDsn("duckdb", path, f"duckdb:///{path}")
    if lowered.startswith(_POSTGRES_SCHEMES) or _LIBPQ_KEYWORD.match(text):
        return ParsedDsn("postgres", text, mask_password(text))
    if lowered.startswith(_MYSQL_SCHEMES):
        return ParsedDsn("mysql", text, mask_url_password(text))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConnectionFailedError(f"unsupported DSN scheme {scheme!r}: give {_SUPPORTED}")
    if is_duckdb_path(Path(text).expanduser()):
        return ParsedDsn("duckdb", text, text)
    return ParsedDsn("sqlite", text, text)


def is_data_file(path: Path) -> bool:
    """A CSV, TSV, Parquet or JSON file by its name, compressed (.gz, .zst) or not."""
    name = path.name.lower().removesuffix(".gz").removesuffix(".zst")
    return name.endswith(DATA_FILE_SUFFIXES)


def is_duckdb_path(path: Path) -> bool:
    """A DuckDB database file, a data file, or a folder holding data files."""
    if path.name.lower().endswith(DUCKDB_SUFFIXES) or is_data_file(path):
        return True
    return path.is_dir() and any(is_data_file(p) and p.is_file() for p in path.iterdir())


def _file_url_path(url: str, scheme: str, example: str) -> str:
    # scheme:///relative/path and scheme:////absolute/path, as SQLAlchemy spells them.
    parts = urlsplit(url)
    path = unquote(parts.path)
    if parts.netloc:
        raise ConnectionFailedError(f"a {scheme} URL has no host: write {scheme}:///path, not {url!r}")
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise ConnectionFailedError(f"no file path in {url!r}: write {scheme}:///path/to/{example}")
    return path


def missing_relative_url_file(dsn: str, target: str) -> str | None:
    """For a sqlite:/// or duckdb:/// URL whose relative path names nothing: the message explaining the slashes
    (with the absolute spelling, named as existing when it does); None for any other DSN."""
    path = Path(target).expanduser()
    scheme = dsn.strip().lower().split(":", 1)[0]
    if scheme not in ("sqlite", "duckdb") or path.is_absolute() or path.exists():
        return None
    absolute = Path("/", target)
    meant = (
        f"did you mean {scheme}:///{absolute} ({absolute} exists)?"
        if absolute.exists()
        else f"write {scheme}:///{absolute} for {absolute}"
    )
    engine = "SQLite" if scheme == "sqlite" else "DuckDB"
    return (
        f"no {engine} database at {path.resolve()}: in a {scheme}: URL three slashes start a path relative to "
        f"the current directory and four an absolute one; {meant}"
    )


def mask_url_password(url: str) -> str:
    """The URL with its password replaced by ***, for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def mask_password(conninfo: str) -> str:
    """The PostgreSQL DSN with its password replaced by ***, for logs and messages."""
    import psycopg.conninfo  # only a PostgreSQL DSN needs psycopg (0.2 s to import)

    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConnectionFailedError(f"invalid PostgreSQL DSN: {exc}") from None
    if "password" not in params:
        return conninfo
    if conninfo.lower().startswith(_POSTGRES_SCHEMES) and urlsplit(conninfo).password is not None:
        return mask_url_password(conninfo)
    params["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **params)

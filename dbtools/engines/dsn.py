"""Parse a DSN into the engine it names: a SQLite path or `sqlite:///` URL, or a PostgreSQL URL or libpq string."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg.conninfo

from dbtools.errors import ConnectionFailedError

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_LIBPQ_KEYWORD = re.compile(r"^\s*\w+\s*=")


@dataclass(frozen=True)
class ParsedDsn:
    engine: str  # "sqlite" | "postgres"
    target: str  # SQLite: a file path; PostgreSQL: the conninfo string handed to libpq
    display_name: str  # the DSN with any password masked


def parse_dsn(dsn: str) -> ParsedDsn:
    """Tell SQLite from PostgreSQL; raise ConnectionFailedError for a DSN that names neither."""
    text = dsn.strip()
    if not text:
        raise ConnectionFailedError("empty DSN: give a SQLite file path, sqlite:///path or postgresql://...")
    lowered = text.lower()
    if lowered.startswith("sqlite:"):
        path = _sqlite_url_path(text)
        return ParsedDsn("sqlite", path, f"sqlite:///{path}")
    if lowered.startswith(_POSTGRES_SCHEMES) or _LIBPQ_KEYWORD.match(text):
        return ParsedDsn("postgres", text, mask_password(text))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConnectionFailedError(
            f"unsupported DSN scheme {scheme!r}: use a SQLite path, sqlite:///path, or postgresql://..."
        )
    return ParsedDsn("sqlite", text, text)


def _sqlite_url_path(url: str) -> str:
    # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them.
    parts = urlsplit(url)
    path = unquote(parts.path)
    if parts.netloc:
        raise ConnectionFailedError(f"a sqlite URL has no host: write sqlite:///path, not {url!r}")
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise ConnectionFailedError(f"no file path in {url!r}: write sqlite:///path/to/file.sqlite")
    return path


def missing_relative_url_file(dsn: str, target: str) -> str | None:
    """For a sqlite:/// URL whose relative path names nothing: the message explaining the slashes (with the
    absolute spelling, named as existing when it does); None for any other DSN."""
    path = Path(target).expanduser()
    if not dsn.strip().lower().startswith("sqlite:") or path.is_absolute() or path.exists():
        return None
    absolute = Path("/", target)
    meant = (
        f"did you mean sqlite:///{absolute} ({absolute} exists)?"
        if absolute.exists()
        else f"write sqlite:///{absolute} for {absolute}"
    )
    return (
        f"no SQLite database at {path.resolve()}: in a sqlite: URL three slashes start a path relative to the "
        f"current directory and four an absolute one; {meant}"
    )


def mask_password(conninfo: str) -> str:
    """The PostgreSQL DSN with its password replaced by ***, for logs and messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConnectionFailedError(f"invalid PostgreSQL DSN: {exc}") from None
    if "password" not in params:
        return conninfo
    if conninfo.lower().startswith(_POSTGRES_SCHEMES):
        parts = urlsplit(conninfo)
        if parts.password is not None:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
            return parts._replace(netloc=netloc).geturl()
    params["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **params)

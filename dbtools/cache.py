"""The user cache directory of sqlscout, where the demo database and the value-search indexes live."""

from __future__ import annotations

import os
from pathlib import Path

from dbtools.errors import DatabaseToolError


def cache_dir() -> Path:
    """`$SQLSCOUT_CACHE_DIR`, else `~/.cache/sqlscout`; created when missing."""
    path = Path(os.environ.get("SQLSCOUT_CACHE_DIR") or Path.home() / ".cache" / "sqlscout").expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DatabaseToolError(
            f"cannot create the cache directory {path}: {error.strerror}; "
            "point SQLSCOUT_CACHE_DIR at a writable folder"
        ) from error
    return path

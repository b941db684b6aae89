"""The user cache directory, and the bundled demo database built into it on first use."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from dbtools.demo.build import GENERATOR_VERSION, build_demo
from dbtools.errors import DatabaseToolError

log = logging.getLogger(__name__)

DEFAULT_SEED = 0


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


def default_demo_path() -> Path:
    """The default demo database (scale 1, seed 0), built on first use; the file name carries the generator version.

    The build goes to a temporary file renamed into place, so a reader never sees a half-built file and two
    processes building at once both end with the same complete file.
    """
    target = cache_dir() / f"demo-v{GENERATOR_VERSION}-seed{DEFAULT_SEED}.sqlite"
    if target.exists():
        return target
    log.warning("building the demo database into %s (first use; takes a few seconds)", target)
    fd, temp_name = tempfile.mkstemp(prefix=target.stem + ".", suffix=".building", dir=target.parent)
    os.close(fd)
    try:
        build_demo(temp_name, seed=DEFAULT_SEED)
        os.replace(temp_name, target)
    finally:
        Path(temp_name).unlink(missing_ok=True)
    return target

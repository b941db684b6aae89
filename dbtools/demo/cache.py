"""The default demo database, built into the user cache directory on first use and kept there."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from dbtools.cache import cache_dir
from dbtools.demo.build import GENERATOR_VERSION, build_demo

log = logging.getLogger(__name__)

DEFAULT_SEED = 0


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

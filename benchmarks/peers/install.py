"""Installs the peer servers at pinned versions into the cache directory, once; later runs reuse them."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

DBHUB_PACKAGE = "@bytebase/dbhub"
# The last release that runs on Node 20; later ones need Node >= 22.5.
DBHUB_VERSION = "0.21.2"
DBHUB_MIN_NODE = 20
REFERENCE_PACKAGE = "mcp-server-sqlite"
REFERENCE_VERSION = "2025.4.25"
# The reference server is written against the mcp 1.x server SDK; pinned so its protocol side stays fixed.
REFERENCE_MCP = "1.30.0"
INSTALL_TIMEOUT_S = 1800
DONE_MARKER = ".installed"


class PeerUnavailable(Exception):
    """A peer that cannot be installed or started here; the message says why."""


def _run(command: list[str], what: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise PeerUnavailable(
            f"{what} took over {INSTALL_TIMEOUT_S} s (is the registry reachable?)"
        ) from error
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip().splitlines()
        # npm and pip bury the cause among warnings and hints; their error lines name it (ECONNREFUSED, ...).
        cause = [line for line in output if "error" in line.lower()][:4] or output[-4:]
        raise PeerUnavailable(f"{what} failed with exit status {done.returncode}:\n" + "\n".join(cause))
    return done.stdout


def _install_once(
    target: Path, description: str, steps: list[tuple[list[str], str]], files: dict[str, str] | None = None
) -> None:
    """Write files into target and run steps, unless an earlier run finished them; a half-finished install is
    started over."""
    if (target / DONE_MARKER).exists():
        return
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name, text in (files or {}).items():
        (target / name).write_text(text)
    log.warning("installing %s into %s (first run only)", description, target)
    try:
        for command, what in steps:
            _run(command, what)
    except PeerUnavailable:
        shutil.rmtree(target, ignore_errors=True)
        raise
    (target / DONE_MARKER).write_text(description + "\n")


def node_version() -> str:
    """`node --version` (v20.1.0), or PeerUnavailable when node or npm is missing or too old for DBHub."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise PeerUnavailable(f"DBHub needs node and npm (Node >= {DBHUB_MIN_NODE}) on PATH")
    version = _run(["node", "--version"], "node --version").strip()
    major = re.match(r"v(\d+)", version)
    if major is None or int(major.group(1)) < DBHUB_MIN_NODE:
        raise PeerUnavailable(f"DBHub {DBHUB_VERSION} needs Node >= {DBHUB_MIN_NODE}, found {version}")
    return version


def install_dbhub(root: Path) -> Path:
    """DBHub's entry script under root, installed with npm on first use."""
    node_version()
    target = root / f"dbhub-{DBHUB_VERSION}"
    manifest = {
        "private": True,
        "dependencies": {DBHUB_PACKAGE: DBHUB_VERSION},
        # better-sqlite3 builds its native module in an install script; newer npm runs only allowed ones.
        "allowScripts": {"better-sqlite3": True},
    }
    npm_install = ["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund"]
    _install_once(
        target,
        f"DBHub {DBHUB_VERSION} (compiles a native SQLite module: a few minutes)",
        [(npm_install, f"npm install {DBHUB_PACKAGE}@{DBHUB_VERSION}")],
        files={"package.json": json.dumps(manifest, indent=2) + "\n"},
    )
    return target / "node_modules" / DBHUB_PACKAGE / "dist" / "index.js"


def install_reference(root: Path) -> Path:
    """The reference SQLite server's executable, in its own virtual environment under root."""
    target = root / f"{REFERENCE_PACKAGE}-{REFERENCE_VERSION}"
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    packages = [f"{REFERENCE_PACKAGE}=={REFERENCE_VERSION}", f"mcp=={REFERENCE_MCP}"]
    _install_once(
        target,
        f"{REFERENCE_PACKAGE} {REFERENCE_VERSION} with mcp {REFERENCE_MCP}",
        [
            ([sys.executable, "-m", "venv", str(target)], "creating a virtual environment"),
            ([*pip, *packages], f"pip install {' '.join(packages)}"),
        ],
    )
    return target / "bin" / REFERENCE_PACKAGE

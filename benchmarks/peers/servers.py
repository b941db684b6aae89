"""How each server is started over stdio, and which of its own tool calls does each task."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from mcp import StdioServerParameters

from benchmarks.peers.install import DBHUB_VERSION, REFERENCE_PACKAGE, REFERENCE_VERSION
from benchmarks.peers.sdk_floor import NOOP_TOOL
from benchmarks.peers.tasks import (
    BIG_RESULT,
    BIG_SQL,
    DESCRIBE_TABLE,
    DESCRIBED_TABLE,
    GROUP_BY,
    GROUP_BY_SQL,
    LIST_TABLES,
    ROW_CAP,
    SAMPLE_ROWS,
    SAMPLE_SIZE,
    SAMPLE_SQL,
    SAMPLED_TABLE,
    Call,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SQLSCOUT = "sqlscout"
DBHUB = f"DBHub {DBHUB_VERSION}"
REFERENCE = f"{REFERENCE_PACKAGE} {REFERENCE_VERSION}"
SDK_FLOOR = "mcp SDK floor"


@dataclass(frozen=True)
class Server:
    """A server to start and the call it answers each task with; a task it has no call for is left out."""

    name: str
    params: StdioServerParameters
    calls: dict[str, Call]


def _project_module(module: str, *args: str) -> StdioServerParameters:
    """A module of this project run with this interpreter, from the project's root."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", module, *args],
        env={"PYTHONPATH": str(PROJECT_ROOT)},
        cwd=str(PROJECT_ROOT),
    )


def sqlscout(dsn: str) -> Server:
    params = _project_module("mcp_server", "--dsn", dsn, "--max-rows", str(ROW_CAP), "--log-level", "WARNING")
    calls = {
        LIST_TABLES: Call("list_tables"),
        DESCRIBE_TABLE: Call("describe_table", {"table": DESCRIBED_TABLE}),
        SAMPLE_ROWS: Call("sample_rows", {"table": SAMPLED_TABLE, "limit": SAMPLE_SIZE}),
        GROUP_BY: Call("run_query", {"sql": GROUP_BY_SQL}),
        BIG_RESULT: Call("run_query", {"sql": BIG_SQL, "max_rows": ROW_CAP}),
    }
    return Server(SQLSCOUT, params, calls)


def dbhub_config(dsn: str) -> str:
    """dbhub.toml: one read-only source whose execute_sql returns at most ROW_CAP rows (its only row cap)."""
    quoted = json.dumps(dsn)  # a JSON string is a valid TOML basic string
    return (
        f'[[sources]]\nid = "demo"\ndsn = {quoted}\n\n'
        f'[[tools]]\nname = "execute_sql"\nsource = "demo"\nreadonly = true\nmax_rows = {ROW_CAP}\n\n'
        '[[tools]]\nname = "search_objects"\nsource = "demo"\n'
    )


def dbhub(entry: Path, dsn: str, engine: str, workdir: Path) -> Server:
    """DBHub on the demo database; its config file goes to workdir, which is also its working directory."""
    if engine == "sqlite":
        dsn = f"sqlite://{Path(dsn).resolve()}"
    config = workdir / "dbhub.toml"
    config.write_text(dbhub_config(dsn))
    params = StdioServerParameters(
        command="node", args=[str(entry), "--transport", "stdio", "--config", str(config)], cwd=str(workdir)
    )
    calls = {
        # Its default limit of 100 objects would cut the demo's table list short.
        LIST_TABLES: Call("search_objects", {"object_type": "table", "limit": 1000}),
        DESCRIBE_TABLE: Call(
            "search_objects", {"object_type": "table", "pattern": DESCRIBED_TABLE, "detail_level": "full"}
        ),
        SAMPLE_ROWS: Call("execute_sql", {"sql": SAMPLE_SQL}),
        GROUP_BY: Call("execute_sql", {"sql": GROUP_BY_SQL}),
        BIG_RESULT: Call("execute_sql", {"sql": BIG_SQL}),
    }
    return Server(DBHUB, params, calls)


def reference(executable: Path, sqlite_path: str) -> Server:
    """The reference SQLite server; it has no row cap, so the big result gets a LIMIT in its SQL."""
    params = StdioServerParameters(
        command=str(executable), args=["--db-path", str(Path(sqlite_path).resolve())]
    )
    calls = {
        LIST_TABLES: Call("list_tables"),
        DESCRIBE_TABLE: Call("describe_table", {"table_name": DESCRIBED_TABLE}),
        SAMPLE_ROWS: Call("read_query", {"query": SAMPLE_SQL}),
        GROUP_BY: Call("read_query", {"query": GROUP_BY_SQL}),
        BIG_RESULT: Call(
            "read_query", {"query": f"{BIG_SQL} LIMIT {ROW_CAP}"}, note=f"LIMIT {ROW_CAP} in the SQL"
        ),
    }
    return Server(REFERENCE, params, calls)


def sdk_floor() -> Server:
    """A server on sqlscout's own mcp SDK whose one tool does nothing: it answers every small task with the same
    no-op call, the least any server built on the SDK can cost (the big result is left out)."""
    params = _project_module("benchmarks.peers.sdk_floor")
    noop = Call(NOOP_TOOL, note="no work at all")
    return Server(
        SDK_FLOOR, params, {task: noop for task in (LIST_TABLES, DESCRIBE_TABLE, SAMPLE_ROWS, GROUP_BY)}
    )

"""sqlscout against DBHub and the reference SQLite MCP server, side by side on the demo database.

Installs the peers at pinned versions into the cache directory on the first run, starts every server over
stdio and drives them from one MCP client; prints a section per database and records it in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import configargparse

from benchmarks import tables
from benchmarks.model_results import record_section
from benchmarks.peers import report
from benchmarks.peers.drive import measure
from benchmarks.peers.install import (
    DBHUB_PACKAGE,
    REFERENCE_MCP,
    PeerUnavailable,
    install_dbhub,
    install_reference,
    node_version,
)
from benchmarks.peers.servers import (
    DBHUB,
    PROJECT_ROOT,
    REFERENCE,
    SQLSCOUT,
    dbhub,
    reference,
    sdk_floor,
    sqlscout,
)
from benchmarks.peers.tasks import BIG_SQL, TASKS
from benchmarks.servers.postgres import PostgresServer
from benchmarks.tables import CurrentTable
from dbtools.cache import cache_dir
from dbtools.demo import default_demo_path
from dbtools.demo.postgres import load_postgres
from dbtools.engines import open_database
from dbtools.errors import DatabaseToolError

log = logging.getLogger("benchmarks.peers")

ENGINE_LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
COMMANDS = {
    "sqlite": "python -m benchmarks.peers",
    "postgres": "python -m benchmarks.peers --pg-throwaway",
}


def _sqlscout_commit() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    return f" at commit {done.stdout.strip()}" if done.returncode == 0 else ""


def _database_facts(dsn: str) -> tuple[str, str, int]:
    """The engine (sqlite or postgres), its version, and how many rows the big query returns uncapped."""
    db = open_database(dsn, timeout_s=600)
    try:
        version_sql = "SELECT sqlite_version()" if db.dialect == "sqlite" else "SHOW server_version"
        (version,) = next(db.stream(version_sql))
        (rows,) = next(db.stream(f"SELECT COUNT(*) FROM ({BIG_SQL}) AS q"))
    except DatabaseToolError as error:
        raise SystemExit(
            f"the database does not hold the demo ({error}); load it with "
            "`python -m dbtools.demo load-postgres DSN`, or pass --pg-throwaway"
        ) from error
    finally:
        db.close()
    return db.dialect, version, rows


def _install_peers(root: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """What each peer runs from, and for each peer that cannot run here, why."""
    installed, skipped = {}, {}
    for name, install in ((DBHUB, install_dbhub), (REFERENCE, install_reference)):
        try:
            installed[name] = install(root)
        except PeerUnavailable as error:
            skipped[name] = str(error)
            log.warning("skipping %s: %s", name, error)
    return installed, skipped


def _setting(engine: str, version: str) -> str:
    """Date, machine, versions and database of the run."""
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        node = node_version()
    except PeerUnavailable:
        node = "none"
    return (
        f"{now}, {tables.cpu_name()} ({platform.machine()}), {os.cpu_count()} cores, {ram_gib:.0f} GiB RAM, "
        f"load average {os.getloadavg()[0]:.1f} at the start; Python {platform.python_version()}, "
        f"Node {node}; one MCP client (mcp {importlib.metadata.version('mcp')}) drives every server over "
        f"stdio. sqlscout{_sqlscout_commit()}; DBHub from npm `{DBHUB_PACKAGE}`; {REFERENCE} with "
        f"mcp {REFERENCE_MCP} in its own virtual environment. Demo database on "
        f"{ENGINE_LABELS[engine]} {version}."
    )


def run_engine(
    dsn: str, installed: dict[str, Path], skipped: dict[str, str], repeats: int, warmup: int
) -> tuple[str, str, CurrentTable]:
    """Measure every server on one database; returns the section's title and body, and its current table."""
    engine, version, big_rows = _database_facts(dsn)
    peers_root = cache_dir() / "peers"
    with tempfile.TemporaryDirectory(prefix="sqlscout-peers-") as workdir:
        servers = [sqlscout(dsn)]
        if DBHUB in installed:
            servers.append(dbhub(installed[DBHUB], dsn, engine, Path(workdir)))
        if REFERENCE in installed and engine == "sqlite":
            servers.append(reference(installed[REFERENCE], dsn))
        servers.append(sdk_floor())
        log.info("measuring %s on %s", ", ".join(s.name for s in servers), ENGINE_LABELS[engine])
        measures, failed = anyio.run(measure, servers, TASKS, repeats, warmup, peers_root / "logs" / engine)
    if SQLSCOUT in failed:
        raise SystemExit(f"sqlscout {failed[SQLSCOUT]}")
    ours, *peers = measures
    notes = [f"{name} skipped: {reason}" for name, reason in {**skipped, **failed}.items()]
    if engine != "sqlite":
        notes.append(f"{REFERENCE} serves SQLite only.")
    notes += [f"Error: {line}" for line in report.errors(measures)]
    body = "\n\n".join(
        [
            _setting(engine, version),
            report.method(repeats, warmup, big_rows),
            report.tools_table(ours, peers),
            report.tasks_table(ours, peers, TASKS),
            *notes,
        ]
    )
    if any(task.error for task in ours.tasks.values()):
        print(body)
        raise SystemExit("sqlscout failed a task; RESULTS.md left as it was")
    title = f"Peer MCP servers on {ENGINE_LABELS[engine]} (`{COMMANDS[engine]}`)"
    columns, rows = report.task_grid(ours, peers, TASKS)
    table = CurrentTable(
        key=f"peers_{engine}",
        title=f"Peer MCP servers on {ENGINE_LABELS[engine]}",
        section=title,
        command=COMMANDS[engine],
        machine=f"{tables.cpu_name()}, {os.cpu_count()} cores",
        date=tables.now(),
        columns=columns,
        rows=rows,
        note=f"Each server over stdio, median of {repeats} calls; `chars`: the result's text content.",
    )
    return title, body, table


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.peers", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--pg-dsn",
        env_var="SQLSCOUT_BENCH_PG_DSN",
        help="also measure this PostgreSQL database (a postgresql:// URL) holding the demo",
    )
    parser.add_argument(
        "--pg-throwaway",
        action="store_true",
        env_var="SQLSCOUT_BENCH_PG_THROWAWAY",
        help="also measure PostgreSQL: start a throwaway server and load the demo into it",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=20,
        env_var="SQLSCOUT_BENCH_REPEATS",
        help="timed calls per task and server",
    )
    parser.add_argument(
        "--warmup", type=int, default=2, env_var="SQLSCOUT_BENCH_WARMUP", help="untimed rounds first"
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("--repeats must be at least 1 and --warmup at least 0")
    if args.pg_dsn and args.pg_throwaway:
        raise SystemExit("give --pg-dsn or --pg-throwaway, not both: each fills the PostgreSQL section")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    logging.getLogger("mcp").setLevel(logging.WARNING)  # one line per message would drown the progress
    installed, skipped = _install_peers(cache_dir() / "peers")
    demo = str(default_demo_path())
    throwaway = PostgresServer() if args.pg_throwaway else None
    try:
        dsns = [demo]
        if args.pg_dsn:
            dsns.append(args.pg_dsn)
        if throwaway is not None:
            dsns.append(throwaway.start())
            log.info("loading the demo into the throwaway PostgreSQL")
            load_postgres(throwaway.dsn, demo)
        for dsn in dsns:
            title, body, table = run_engine(dsn, installed, skipped, args.repeats, args.warmup)
            print(f"## {title}\n\n{body}\n", flush=True)
            if not args.no_record:
                record_section(title, body)
                tables.record(table)
    finally:
        if throwaway is not None:
            throwaway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What hiding costs: the peers benchmark's tasks on the demo database with visibility rules on (hidden columns,
a hidden table and a row filter) against the same tasks with none, each tool called in this process so that the
ratio is the catalog filtering and query rewriting alone.

Usage: `python -m benchmarks.hidden_rules [--repeats N] [--no-record]`; the PostgreSQL run needs the throwaway server
(`--pg-throwaway`), as the peers benchmark does.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import configargparse

from benchmarks import tables
from benchmarks.peers.tasks import (
    BIG_RESULT,
    BIG_SQL,
    DESCRIBED_TABLE,
    GROUP_BY,
    GROUP_BY_SQL,
    ROW_CAP,
    SAMPLE_SIZE,
    SAMPLED_TABLE,
    TASKS,
)
from benchmarks.servers.postgres import PostgresServer
from benchmarks.tables import CurrentTable, markdown_table
from dbtools.access.rules import VisibilityRules
from dbtools.demo import default_demo_path
from dbtools.demo.postgres import load_postgres
from dbtools.sources import ServerLimits, SourceSet, SourceSpec
from mcp_server.identities import Identities
from mcp_server.model_runner import ModelRunner
from mcp_server.server import ScoutTools
from mcp_server.settings import Settings

RULES = VisibilityRules(
    hidden_tables=("*_audit", "employees"),
    hidden_columns=("customers.email", "customers.phone", "customers.date_of_birth", "orders.notes"),
    row_filters=(("orders", "status <> 'cancelled'"),),
)
COLUMNS = ["engine", "task", "no rules", "with rules", "ratio"]
LIMITS = ServerLimits(timeout=30.0, max_rows=ROW_CAP, pool_size=4, connect_timeout=5)


def task_calls(tools: ScoutTools) -> dict[str, Callable[[], object]]:
    return dict(
        zip(
            TASKS,
            (
                lambda: tools.list_tables(),
                lambda: tools.describe_table(DESCRIBED_TABLE),
                lambda: tools.sample_rows(SAMPLED_TABLE, limit=SAMPLE_SIZE),
                lambda: tools.run_query(GROUP_BY_SQL),
                lambda: tools.run_query(BIG_SQL, max_rows=ROW_CAP),
            ),
            strict=True,
        )
    )


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = call()
        samples.append(time.perf_counter() - started)
        assert not getattr(result, "is_error", False)
    return statistics.median(samples) * 1000


def measure(dsn: str, repeats: int) -> dict[str, tuple[float, float]]:
    """Per task: the median ms without rules and with them."""
    plain = SourceSet([SourceSpec("main", dsn)], LIMITS)
    hidden = SourceSet([SourceSpec("main", dsn, rules=RULES)], LIMITS)
    settings = Settings(max_rows=ROW_CAP)
    try:
        without = task_calls(ScoutTools(settings, plain, ModelRunner(settings), Identities()))
        with_rules = task_calls(ScoutTools(settings, hidden, ModelRunner(settings), Identities()))
        rows = {
            task: (median_ms(without[task], repeats), median_ms(with_rules[task], repeats)) for task in TASKS
        }
        # A query met for the first time is rewritten in full; repeats come from the guard's memory.
        guard = hidden.get(None).database()._view()[1]
        for task, sql in ((GROUP_BY, GROUP_BY_SQL), (BIG_RESULT, BIG_SQL)):
            rows[f"{task}: its first rewriting"] = (
                0.0,
                median_ms(lambda sql=sql: guard._rewrite(sql), repeats),
            )
        return rows
    finally:
        plain.close()
        hidden.close()


def table_rows(engine: str, rows: dict[str, tuple[float, float]]) -> list[list[str]]:
    """A row per task: without rules, with them and the ratio ('–' where a task runs only with rules)."""
    return [
        [
            engine,
            task,
            f"{without:.2f} ms" if without else "–",
            f"{with_rules:.2f} ms",
            f"{with_rules / without:.2f}x" if without else "–",
        ]
        for task, (without, with_rules) in rows.items()
    ]


def current(rows: list[list[str]]) -> CurrentTable:
    return CurrentTable(
        key="hidden_rules",
        title="What hiding costs",
        section="What hiding costs (`python -m benchmarks.hidden_rules --pg-throwaway`)",
        command="python -m benchmarks.hidden_rules --pg-throwaway",
        machine=tables.machine(),
        date=tables.now(),
        columns=COLUMNS,
        rows=rows,
        note="Each tool called in this process on the demo database, median of the repeats; the rules hide four "
        "columns and two table patterns and filter the rows of `orders`.",
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.hidden_rules", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--repeats", type=int, default=30, env_var="SQLSCOUT_BENCH_REPEATS", help="timed calls a task"
    )
    parser.add_argument(
        "--pg-throwaway",
        action="store_true",
        env_var="SQLSCOUT_BENCH_PG_THROWAWAY",
        help="also on the demo database loaded into a throwaway PostgreSQL server",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    rows = table_rows("SQLite", measure(str(default_demo_path()), args.repeats))
    if args.pg_throwaway:
        server = PostgresServer()
        try:
            load_postgres(server.start(), default_demo_path())
            rows += table_rows("PostgreSQL", measure(server.dsn, args.repeats))
        finally:
            server.stop()
    print(markdown_table(COLUMNS, rows))
    if not args.no_record:
        tables.record(current(rows))


if __name__ == "__main__":
    main()

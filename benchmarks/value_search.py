"""Value search against a full LIKE scan of every text column, on the >= 5M-row demo database (SQLite, PostgreSQL).

Run `python -m benchmarks.value_search`; the numbers go to benchmarks/RESULTS.md with machine and date.
"""

from __future__ import annotations

import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import configargparse
import psycopg

from benchmarks import tables
from benchmarks.model_results import record_section
from benchmarks.servers.postgres import PostgresServer
from benchmarks.tables import CurrentTable, markdown_table
from dbtools.cache import cache_dir
from dbtools.demo import GENERATOR_VERSION, build_demo
from dbtools.demo.postgres import load_postgres
from dbtools.engines import Database, open_database
from dbtools.value_search import ValueIndex
from dbtools.value_search.store import fold, is_text_type

log = logging.getLogger("benchmarks.value_search")

SECTION = "Value search (`python -m benchmarks.value_search`)"
COLUMNS = [
    "engine",
    "index build (s)",
    "lookups/s",
    "median ms",
    "p95 ms",
    "source value found",
    "full scan median ms",
    "speed-up (scan / median)",
]
TARGET_MS = 50.0
# Columns the lookups are drawn from: names, places, codes and statuses people ask about.
QUERY_SOURCES = [
    ("countries", "name"),
    ("cities", "name"),
    ("customers", "last_name"),
    ("customers", "company_name"),
    ("products", "prod_nm"),
    ("orders", "order_number"),
    ("orders", "status"),
    ("supportTickets", "ticketNumber"),
    ("shipments", "tracking_number"),
    ("Employees", "Email"),
    ("carriers", "carrier_name"),
    ("suppliers", "supp_nm"),
]


def make_queries(db: Database, count: int, seed: int) -> list[tuple[str, str, str]]:
    """(kind, text, source value) lookups: real values as they are, in the other case, substrings of them, and
    with a one-letter typo."""
    rng = random.Random(seed)
    pool = []
    for table, column in QUERY_SOURCES:
        sql = (
            f"SELECT DISTINCT {db.quote(column)} FROM {db.quote(table)} WHERE {db.quote(column)} IS NOT NULL "
            f"ORDER BY 1 LIMIT 200"
        )
        pool += [v for (v,) in db.stream(sql) if len(v) >= 6]
    queries = []
    for i in range(count):
        source = value = rng.choice(pool)
        kind = ("exact", "case", "partial", "typo")[i % 4]
        if kind == "case":
            value = value.swapcase()
        elif kind == "partial":
            start = rng.randrange(0, len(value) - 4)
            value = value[start : start + rng.randint(4, min(8, len(value) - start))]
        elif kind == "typo":
            at = rng.randrange(1, len(value) - 1)
            value = value[:at] + rng.choice("aeiouxrst") + value[at + 1 :]
        queries.append((kind, value, source))
    return queries


def like_scan(db: Database, text: str) -> int:
    """The peer: one pass over every table, counting case-insensitive substring hits in each text column."""
    operator = "LIKE" if db.dialect == "sqlite" else "ILIKE"  # SQLite's LIKE ignores ASCII case already
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    hits = 0
    for table in db.tables():
        columns = [c for c in table.columns if is_text_type(c.type)]
        if not columns:
            continue
        sums = ", ".join(
            f"SUM(CASE WHEN CAST({db.quote(c.name)} AS TEXT) {operator} {db.placeholder} ESCAPE '\\' "
            "THEN 1 ELSE 0 END)"
            for c in columns
        )
        row = next(
            db.stream(f"SELECT {sums} FROM {db.quote(table.name)}", [pattern] * len(columns), timeout_s=3600)
        )
        hits += sum(v or 0 for v in row)
    return hits


def _grounded(kind: str, text: str, source: str, matches: list) -> bool:
    """Whether the results lead back to the value the lookup was made from (any value holding a substring)."""
    values = [v for m in matches for v in m.values]
    if kind == "partial":
        return any(fold(text) in fold(v) for v in values)
    return source in values


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(db: Database, queries: list[tuple[str, str]], scans: int, work: Path) -> dict:
    index = ValueIndex(
        db, index_path=work / f"index-{db.dialect}-{uuid.uuid4().hex[:6]}.sqlite", progress=True
    )
    started = time.perf_counter()
    index.refresh()
    build_s = time.perf_counter() - started
    latencies, found = [], 0
    for kind, text, source in queries:
        started = time.perf_counter()
        matches = index.search(text)
        latencies.append((time.perf_counter() - started) * 1000)
        found += _grounded(kind, text, source, matches)
    scan_ms = []
    for _, text, _ in queries[:scans]:
        started = time.perf_counter()
        like_scan(db, text)
        scan_ms.append((time.perf_counter() - started) * 1000)
    median = statistics.median(latencies)
    return {
        "engine": "SQLite" if db.dialect == "sqlite" else "PostgreSQL",
        "build_s": build_s,
        "lookups_per_s": len(latencies) / (sum(latencies) / 1000),
        "median_ms": median,
        "p95_ms": _percentile(latencies, 0.95),
        "found": found / len(queries),
        "scan_median_ms": statistics.median(scan_ms),
        "speedup": statistics.median(scan_ms) / median,
    }


def _machine() -> str:
    memory = ""
    try:
        kib = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
        memory = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores{memory}, Python {platform.python_version()}"


def table_rows(rows: list[dict]) -> list[list[str]]:
    return [
        [
            r["engine"],
            f"{r['build_s']:.1f}",
            f"{r['lookups_per_s']:.0f}",
            f"{r['median_ms']:.1f}",
            f"{r['p95_ms']:.1f}",
            f"{r['found']:.0%}",
            f"{r['scan_median_ms']:.0f}",
            f"{r['speedup']:.0f}x",
        ]
        for r in rows
    ]


def current(rows: list[dict], date: str) -> CurrentTable:
    """The engines' lookups against a full scan; the README's headline: the median lookup on each engine."""
    medians = " / ".join(f"{r['median_ms']:.1f}" for r in rows)
    scans = " / ".join(f"{r['scan_median_ms']:.0f}" for r in rows)
    return CurrentTable(
        key="value_search",
        title="Value search",
        section=SECTION,
        command="python -m benchmarks.value_search",
        machine=_machine(),
        date=date,
        columns=COLUMNS,
        rows=table_rows(rows),
        headline=[
            [
                f"value lookup, median ms ({' / '.join(r['engine'] for r in rows)})",
                _machine(),
                medians,
                f"LIKE scan {scans}",
                " / ".join(f"{r['speedup']:.0f}x" for r in rows),
            ]
        ],
    )


def write_results(rows: list[dict], total_rows: int, queries: int, scans: int) -> str:
    """Record the section and the current table; returns the section."""
    date = tables.now()
    body = "\n".join(
        [
            f"{date}, {_machine()}. Demo database (generator v{GENERATOR_VERSION}) with {total_rows:,} rows; {queries} "
            "lookups (exact, other case, substring, one-letter typo; `ValueIndex.search`, limit 10) after a one-off "
            "index build, against a LIKE/ILIKE scan of every text column of every table (one pass per table; median "
            f"of {scans} lookups). `source value found`: share of lookups whose results include the value the lookup "
            f"was made from. Target: <= {TARGET_MS:g} ms per lookup.",
            "",
            markdown_table(COLUMNS, table_rows(rows)),
        ]
    )
    record_section(SECTION, body)
    tables.record(current(rows, date))
    return body


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.value_search", description=__doc__)
    parser.add_argument(
        "--scale",
        type=float,
        default=8.5,
        env_var="SQLSCOUT_BENCH_SCALE",
        help="demo scale; 8.5 gives about 5.3M rows",
    )
    parser.add_argument(
        "--queries", type=int, default=200, env_var="SQLSCOUT_BENCH_QUERIES", help="lookups timed per engine"
    )
    parser.add_argument(
        "--scans",
        type=int,
        default=5,
        env_var="SQLSCOUT_BENCH_SCANS",
        help="lookups timed as full LIKE scans, the slow peer",
    )
    parser.add_argument(
        "--engines",
        default="sqlite,postgres",
        env_var="SQLSCOUT_BENCH_ENGINES",
        help="comma-separated: sqlite, postgres",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]

    source = cache_dir() / f"demo-v{GENERATOR_VERSION}-scale{args.scale:g}-seed0.sqlite"
    if not source.exists():
        log.info("building the demo database at scale %g into %s", args.scale, source)
        build_demo(source.with_suffix(".building"), scale=args.scale)
        os.replace(source.with_suffix(".building"), source)
    rows, total_rows = [], 0
    with tempfile.TemporaryDirectory(prefix="sqlscout-bench-") as work:
        lite = open_database(str(source), timeout_s=3600)
        total_rows = sum(
            next(lite.stream(f"SELECT count(*) FROM {lite.quote(t.name)}"))[0] for t in lite.tables()
        )
        queries = make_queries(lite, args.queries, seed=0)
        if "sqlite" in engines:
            rows.append(measure(lite, queries, args.scans, Path(work)))
            print(rows[-1], flush=True)
        lite.close()
        if "postgres" in engines:
            server = PostgresServer()
            try:
                dsn = server.start()
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("CREATE DATABASE bench")
                dsn = dsn.rsplit("/", 1)[0] + "/bench"
                started = time.perf_counter()
                load_postgres(dsn, source)
                log.info("loaded PostgreSQL in %.0f s", time.perf_counter() - started)
                pg = open_database(dsn, timeout_s=3600)
                rows.append(measure(pg, queries, args.scans, Path(work)))
                print(rows[-1], flush=True)
                pg.close()
            finally:
                server.stop()
    if args.no_record:
        print("\n".join(str(r) for r in rows))
    else:
        print(write_results(rows, total_rows, args.queries, args.scans))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MCP round-trip latency per tool over stdio and streamable HTTP, against calling the same tool in-process.

Starts `python -m mcp_server` on the demo database as a subprocess (once per transport) and times each
tool call from a real MCP client; the peer is the server's own tool method called directly in this process,
so the ratio is what the protocol and the transport add. Usage: `python -m benchmarks.mcp_latency`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import configargparse
from mcp import Client, StdioServerParameters

from benchmarks import tables
from benchmarks.plots import grouped_bars
from benchmarks.servers.ports import free_port
from benchmarks.tables import RESULTS_DIR, CurrentTable
from dbtools.demo import default_demo_path
from dbtools.engines import open_database
from dbtools.sources import SourceSet
from mcp_server.identities import Identities
from mcp_server.model_runner import ModelRunner
from mcp_server.server import ScoutTools, build_server
from mcp_server.settings import Settings
from mcp_server.source_tools import server_limits

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CALLS: dict[str, dict] = {
    "list_tables": {"pattern": "order"},
    "describe_table": {"table": "orders"},
    "sample_rows": {"table": "customers", "limit": 5},
    "run_query": {"sql": "SELECT status, COUNT(*) FROM orders GROUP BY status"},
    "search_schema": {"keywords": "customer city"},
}


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def _time_async(call: Callable[[], Awaitable[object]], repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def _time_direct(call: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


async def _time_client(client: Client, repeats: int, warmup: int) -> dict[str, list[float]]:
    timings = {}
    for tool, args in CALLS.items():

        async def call(tool=tool, args=args):
            result = await client.call_tool(tool, args)
            if result.is_error:
                raise RuntimeError(f"{tool} failed: {result.content[0].text}")

        timings[tool] = await _time_async(call, repeats, warmup)
    return timings


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLSCOUT_")}
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


def _wait_for_port(port: int, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the HTTP server exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the HTTP server did not listen on port {port} within {timeout_s:.0f} s")


async def measure(dsn: str, repeats: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    """Per transport, per tool, the seconds of each timed call."""
    settings = Settings(dsn=dsn)
    db = open_database(dsn)
    try:
        sources = SourceSet.serving(db, server_limits(settings))
        tools = ScoutTools(settings, sources, ModelRunner(settings, db), Identities())
        results = {
            "direct": {
                tool: _time_direct(lambda tool=tool, args=args: getattr(tools, tool)(**args), repeats, warmup)
                for tool, args in CALLS.items()
            }
        }
        async with Client(build_server(settings, db)) as client:
            results["in-memory MCP"] = await _time_client(client, repeats, warmup)
    finally:
        db.close()
    stdio = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--dsn", dsn, "--log-level", "WARNING"],
        env=_server_env(),
        cwd=str(PROJECT_ROOT),
    )
    async with Client(stdio) as client:
        results["stdio"] = await _time_client(client, repeats, warmup)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mcp_server",
        "--dsn",
        dsn,
        "--transport",
        "http",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    ]
    process = subprocess.Popen(command, env=_server_env(), cwd=PROJECT_ROOT, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, process)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            results["HTTP"] = await _time_client(client, repeats, warmup)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return results


def summarise(results: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Median and p90 milliseconds per transport and tool, with the ratio of each median to the direct call."""
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for transport, by_tool in results.items():
        summary[transport] = {}
        for tool, samples in by_tool.items():
            ordered = sorted(samples)
            median = _median_ms(samples)
            summary[transport][tool] = {
                "median_ms": median,
                "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1000,
                "vs_direct": median / _median_ms(results["direct"][tool]),
            }
    return summary


def render(summary: dict[str, dict[str, dict[str, float]]]) -> str:
    transports = list(summary)
    header = f"{'tool':<16}" + "".join(f"{t + ' ms':>18}" for t in transports)
    header += "".join(f"{t + ' / direct':>25}" for t in transports if t != "direct")
    lines = [header]
    for tool in CALLS:
        line = f"{tool:<16}" + "".join(f"{summary[t][tool]['median_ms']:>18.3f}" for t in transports)
        line += "".join(f"{summary[t][tool]['vs_direct']:>24.1f}x" for t in transports if t != "direct")
        lines.append(line)
    return "\n".join(lines)


def current(summary: dict[str, dict[str, dict[str, float]]], machine: str, date: str) -> CurrentTable:
    """Median milliseconds per tool and transport, and what each transport adds to the direct call."""
    transports = [t for t in summary if t != "direct"]
    rows = [
        [
            tool,
            *(f"{summary[t][tool]['median_ms']:.2f}" for t in summary),
            *(
                f"{summary[t][tool]['median_ms'] - summary['direct'][tool]['median_ms']:.2f}"
                for t in transports
            ),
        ]
        for tool in CALLS
    ]
    return CurrentTable(
        key="mcp_latency",
        title="MCP round trip per tool",
        section="MCP round trip per tool (`python -m benchmarks.mcp_latency`)",
        command="python -m benchmarks.mcp_latency",
        machine=machine,
        date=date,
        columns=["tool", *(f"{t} ms" for t in summary), *(f"{t} adds ms" for t in transports)],
        rows=rows,
        note="Medians on the demo database; `direct` is the tool's method called in the server's own process.",
    )


def draw_plot(out: Path, summary: dict[str, dict[str, dict[str, float]]]) -> None:
    """mcp_latency.png: median milliseconds per tool, one bar per transport."""
    grouped_bars(
        out / "mcp_latency.png",
        title="MCP tool round trip, median (demo database)",
        groups=list(CALLS),
        series={t: [summary[t][tool]["median_ms"] for tool in CALLS] for t in summary},
        ylabel="milliseconds (log scale)",
        log_scale=True,
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.mcp_latency", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dsn", env_var="SQLSCOUT_DSN", help="database (default: the demo database)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=50,
        env_var="SQLSCOUT_BENCH_REPEATS",
        help="timed calls per tool and transport",
    )
    parser.add_argument(
        "--warmup", type=int, default=5, env_var="SQLSCOUT_BENCH_WARMUP", help="untimed calls first"
    )
    parser.add_argument(
        "--out",
        default=str(RESULTS_DIR),
        env_var="SQLSCOUT_BENCH_OUT",
        help="folder for mcp_latency.json and mcp_latency.png",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown the table
    dsn = args.dsn or str(default_demo_path())
    results = anyio.run(measure, dsn, args.repeats, args.warmup)
    summary = summarise(results)
    print(render(summary))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mcp_latency.json").write_text(
        json.dumps({"dsn": dsn, "repeats": args.repeats, "summary": summary}, indent=2) + "\n"
    )
    draw_plot(out, summary)
    print(f"wrote {out / 'mcp_latency.json'} and {out / 'mcp_latency.png'}", file=sys.stderr)
    if not args.no_record:
        tables.record(current(summary, tables.machine(), tables.now()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What serving many sources costs: start-up time and resident memory of `python -m mcp_server --config` with 1
and with 20 SQLite sources, and a tool call's latency on PostgreSQL through an SSH tunnel against the same
call direct.

Starts throwaway PostgreSQL and OpenSSH servers on loopback (Debian's packages, as the tests do) and the
server over streamable HTTP as a subprocess; a real MCP client times the calls. The peer of each row is
measured in the same run: one source for the 20, the direct connection for the tunnel.
Usage: `python -m benchmarks.sources [--calls N] [--no-record]`.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import configargparse
from mcp import Client

from benchmarks import tables
from benchmarks.servers.ports import free_port
from benchmarks.servers.postgres import PostgresServer
from benchmarks.servers.sshd import SshServer
from benchmarks.tables import CurrentTable, markdown_table
from dbtools.demo import default_demo_path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
QUERY = {"sql": "SELECT count(*) FROM pg_class"}
COLUMNS = ["sources", "listening after", "RSS before a call", "RSS with every source open"]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Served:
    """The server on `config` over HTTP; `started_s` is the time from spawn to a first answered call."""

    def __init__(self, config: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcp_server",
                "--transport",
                "http",
                "--port",
                str(self.port),
                "--config",
                str(config),
            ],
            cwd=PROJECT_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while socket.socket().connect_ex(("127.0.0.1", self.port)) != 0:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            time.sleep(0.01)
        self.listening_s = time.perf_counter() - started

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


def sqlite_config(folder: Path, count: int) -> Path:
    demo = default_demo_path()
    lines = []
    for index in range(count):
        copy = folder / f"shop{index}.sqlite"
        shutil.copy(demo, copy)
        lines.append(f'[sources.shop{index}]\ndsn = "{copy}"\n')
    config = folder / f"sources-{count}.toml"
    config.write_text("\n".join(lines))
    return config


async def startup_row(folder: Path, count: int) -> dict:
    """Start-up time, memory before any call, and after list_sources opened every source."""
    server = Served(sqlite_config(folder, count))
    try:
        idle = rss_mib(server.process.pid)
        async with Client(server.url) as client:
            listed = await client.call_tool("list_sources", {})
        assert not listed.is_error, listed.content[0].text
        opened = rss_mib(server.process.pid)
        return {"sources": count, "listening_s": server.listening_s, "idle_mib": idle, "opened_mib": opened}
    finally:
        server.stop()


async def call_latency_ms(config: Path, calls: int) -> float:
    server = Served(config)
    try:
        async with Client(server.url) as client:
            for _ in range(3):
                await client.call_tool("run_query", QUERY)
            samples = []
            for _ in range(calls):
                begun = time.perf_counter()
                result = await client.call_tool("run_query", QUERY)
                samples.append(time.perf_counter() - begun)
                assert not result.is_error, result.content[0].text
        return statistics.median(samples) * 1000
    finally:
        server.stop()


async def run(calls: int, record: bool) -> None:
    folder = Path(tempfile.mkdtemp(prefix="sqlscout-sources-bench-"))
    postgres, sshd = PostgresServer(), SshServer()
    try:
        rows = [await startup_row(folder, count) for count in (1, 20)]
        one, twenty = rows
        cells = [
            [
                str(r["sources"]),
                f"{r['listening_s']:.2f} s",
                f"{r['idle_mib']:.0f} MiB",
                f"{r['opened_mib']:.0f} MiB",
            ]
            for r in rows
        ]
        print(markdown_table(COLUMNS, cells))
        print(
            f"20 against 1 source: start-up {twenty['listening_s'] / one['listening_s']:.2f}x, memory with every "
            f"source open +{twenty['opened_mib'] - one['opened_mib']:.0f} MiB "
            f"({(twenty['opened_mib'] - one['opened_mib']) / 19:.1f} MiB a source)"
        )
        dsn = postgres.start()
        sshd.start()
        direct = folder / "direct.toml"
        direct.write_text(f'[sources.sales]\ndsn = "{dsn}"\n')
        tunnelled = folder / "tunnelled.toml"
        tunnelled.write_text(
            f'[sources.sales]\ndsn = "{dsn}"\nssh = {{ host = "127.0.0.1", port = {sshd.port}, '
            f'user = "{sshd.user}", key_file = "{sshd.client_key}", known_hosts = "{sshd.known_hosts}" }}\n'
        )
        direct_ms = await call_latency_ms(direct, calls)
        tunnel_ms = await call_latency_ms(tunnelled, calls)
        tunnel = (
            f"`run_query` on PostgreSQL, median of {calls} calls: direct {direct_ms:.2f} ms, through an SSH tunnel "
            f"{tunnel_ms:.2f} ms ({tunnel_ms / direct_ms:.2f}x)."
        )
        print(tunnel)
        if record:
            tables.record(
                CurrentTable(
                    key="sources",
                    title="Many sources in one server",
                    section="Many sources in one server (`python -m benchmarks.sources`)",
                    command="python -m benchmarks.sources",
                    machine=tables.machine(),
                    date=tables.now(),
                    columns=COLUMNS,
                    rows=cells,
                    note=tunnel,
                )
            )
    finally:
        sshd.stop()
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.sources", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--calls", type=int, default=50, env_var="SQLSCOUT_BENCH_CALLS", help="timed calls a row"
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    anyio.run(run, args.calls, not args.no_record)


if __name__ == "__main__":
    main()

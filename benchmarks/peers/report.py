"""The side-by-side tables: medians, characters and the ratios sqlscout / peer, as Markdown."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from benchmarks.peers.drive import ServerMeasure, TaskMeasure
from benchmarks.peers.servers import REFERENCE, SDK_FLOOR
from benchmarks.peers.tasks import ROW_CAP
from dbtools.plural import counted

MISSING = "–"


def median_ms(task: TaskMeasure | None) -> float | None:
    if task is None or task.error is not None or not task.seconds:
        return None
    return statistics.median(task.seconds) * 1000


def ratio(ours: float | None, theirs: float | None) -> str:
    """ours / theirs as '0.42x'; below 1 means sqlscout is faster or shorter."""
    if not ours or not theirs:
        return MISSING
    return f"{ours / theirs:.2f}x"


def method(repeats: int, warmup: int, big_rows: int) -> str:
    """How the numbers were taken and what each server's calls return, to read the tables by."""
    calls, rounds = counted(repeats, "call"), counted(warmup, "untimed round")
    return (
        f"Median of {calls} per task after {rounds}; the servers run side by side and are called in "
        "turn, task by task, so load changes fall on each alike. `chars`: characters of the result's text "
        "content, what hosts usually show the model; `structured chars`: its structuredContent as compact "
        "JSON, which hosts that read structured results get instead or as well; tools/list chars: the tool "
        "definitions as compact JSON. Ratios are sqlscout / peer: below 1 means sqlscout is faster or "
        "returns less.\n\n"
        "The calls do not return the same things. Listing: sqlscout gives each table's column and row "
        "counts, the peers names only. Describing: sqlscout gives columns, keys, foreign keys both ways "
        "and CREATE TABLE; DBHub columns, row count and indexes; the reference server its PRAGMA "
        "table_info rows. "
        f"The big result is a join returning {big_rows:,} rows, capped at {ROW_CAP:,} by each server's own "
        f"means: run_query's max_rows for sqlscout, `max_rows = {ROW_CAP}` on execute_sql in DBHub's "
        f"dbhub.toml; {REFERENCE} has no row cap, so {ROW_CAP:,} is a LIMIT in its SQL.\n\n"
        f'{SDK_FLOOR}: a server on the same mcp SDK as sqlscout whose one tool answers "ok" without any '
        "work (`python -m benchmarks.peers.sdk_floor`), called for every small task: the least a call to a "
        "server built on the SDK costs through this client, before any database work."
    )


def _chars(task: TaskMeasure | None) -> int | None:
    return task.text_chars if task is not None and task.error is None else None


def _chars_ratio(ours: int | None, server: ServerMeasure, theirs: int | None) -> str:
    """ours / theirs, except against the SDK floor, whose one-line tool says nothing worth comparing."""
    return MISSING if server.name == SDK_FLOOR else ratio(ours, theirs)


def tools_table(ours: ServerMeasure, peers: Sequence[ServerMeasure]) -> str:
    lines = [
        "| server | version | protocol | tools | tools/list chars | chars sqlscout / peer |",
        "|---|---|---|--:|--:|--:|",
    ]
    for server in (ours, *peers):
        versus = "" if server is ours else _chars_ratio(ours.tools_chars, server, server.tools_chars)
        lines.append(
            f"| {server.name} | {server.version} | {server.protocol} | {server.tool_count} "
            f"| {server.tools_chars:,} | {versus} |"
        )
    return "\n".join(lines)


def _task_row(task_name: str, server: ServerMeasure, ours: ServerMeasure) -> str:
    task = server.tasks.get(task_name)
    ms = median_ms(task)
    chars = _chars(task)
    if task is None:
        cells = [MISSING] * 4
    elif task.error is not None:
        cells = [f"{task.call.label()}: error", MISSING, MISSING, MISSING]
    else:
        structured = f"{task.structured_chars:,}" if task.structured_chars else MISSING
        cells = [task.call.label(), f"{ms:.1f}", f"{chars:,}", structured]
    if server is ours:
        cells += ["", ""]
    else:
        ours_task = ours.tasks.get(task_name)
        cells += [ratio(median_ms(ours_task), ms), _chars_ratio(_chars(ours_task), server, chars)]
    return f"| {task_name} | {server.name} | " + " | ".join(cells) + " |"


def tasks_table(ours: ServerMeasure, peers: Sequence[ServerMeasure], tasks: Sequence[str]) -> str:
    lines = [
        "| task | server | call | median ms | chars | structured chars | ms sqlscout / peer "
        "| chars sqlscout / peer |",
        "|---|---|---|--:|--:|--:|--:|--:|",
    ]
    lines += [_task_row(task, server, ours) for task in tasks for server in (ours, *peers)]
    return "\n".join(lines)


def task_grid(
    ours: ServerMeasure, peers: Sequence[ServerMeasure], tasks: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """The current table: a row per task, a column per server, each cell its median and its text's length."""

    def summary(server: ServerMeasure, task_name: str) -> str:
        task = server.tasks.get(task_name)
        ms = median_ms(task)
        return MISSING if ms is None else f"{ms:.1f} ms, {_chars(task):,} chars"

    servers = (ours, *peers)
    return ["task", *(s.name for s in servers)], [[t, *(summary(s, t) for s in servers)] for t in tasks]


def errors(measures: Sequence[ServerMeasure]) -> list[str]:
    """One line per failed task: server, task and what the server said."""
    return [
        f"{server.name}, {name}: {task.error}"
        for server in measures
        for name, task in server.tasks.items()
        if task.error is not None
    ]

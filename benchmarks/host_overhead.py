"""What the host adds to each token, measured where the device's work is negligible: a tiny random Qwen3.5 on the
CPU, its decode steps captured by the CPU stand-in for CUDA graphs (benchmarks/emulated_capture.py), decoded
through each layer of the serving path in turn: the captured step replayed in a bare loop (the peer), one
Session.generate() call, the 16-token calls the serving scheduler makes, sampled as the agent samples, and the
batch scheduler itself; then an agent turn (a tool result appended, the first token of the reply), appended by
replays of captured prefills and, as its peer, eagerly by an engine that captures nothing.

`python -m benchmarks.host_overhead [--context 512] [--tokens 128] [--append-tokens 400] [--repeats 7]
[--no-record]`. Per path: microseconds per token (the median of the repeats, the paths taking turns), those
outside the replays of the captured step (the host's), and the aten operations per token dispatched outside the
replays: each one a kernel launch or a host wait on a GPU, where a replay is one launch whatever the step holds.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import configargparse
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import tables
from benchmarks.emulated_capture import EmulatedCapture
from benchmarks.model_decode import GREEDY, SHAPES, TOOL_RESULT_TOKENS, build_checkpoint
from benchmarks.tables import CurrentTable, markdown_table
from model.decode_workspace import stop_width
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.serving.conversation import Conversation
from model.serving.scheduler import DECODE_CHUNK_TOKENS, BatchScheduler
from model.serving.shared_prefix import SharedPrefix

SECTION = "Host overhead per token (`python -m benchmarks.host_overhead`)"
SAMPLED = SamplingParams(seed=0)  # the trained sampling settings
COLUMNS = ["path", "per", "us", "us outside the step", "aten ops", "aten ops outside the step"]


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


Work = tuple[Callable[[], None], Callable[[], None]]  # (its set-up, run untimed before each run; the work)


def alternating_medians(
    works: list[Work], repeats: int, capture: EmulatedCapture
) -> list[tuple[float, float]]:
    """(median seconds, median seconds outside replays of captured steps) of each work over rounds that run every
    work in turn, so the machine's load falls on all alike."""
    seconds: list[list[tuple[float, float]]] = [[] for _ in works]
    for _ in range(repeats):
        for times, (set_up, work) in zip(seconds, works, strict=True):
            set_up()
            replayed = capture.replayed_seconds
            started = time.perf_counter()
            work()
            elapsed = time.perf_counter() - started
            times.append((elapsed, elapsed - (capture.replayed_seconds - replayed)))
    return [tuple(statistics.median(column) for column in zip(*times, strict=True)) for times in seconds]


def operations(work: Work, capture: EmulatedCapture) -> tuple[int, int]:
    """(aten operations, those outside replays of captured steps) of one run, counted apart from the timed runs
    since counting slows every operation down."""
    set_up, run = work
    set_up()
    replayed = capture.replayed_ops
    with OpCounter() as counter:
        run()
    return counter.count, counter.count - (capture.replayed_ops - replayed)


@torch.inference_mode()  # as the engine runs; the bare loop writes its inference tensors
def measure(context: int, tokens: int, append_tokens: int, repeats: int) -> list[dict]:
    """One row per path: microseconds and aten operations per generated token, and per agent turn."""
    config = SHAPES["tiny"]
    with tempfile.TemporaryDirectory() as tmp:
        build_checkpoint(config, Path(tmp), torch.device("cpu"), torch.float32)
        loaded = Engine.load(
            tmp,
            EngineOptions(
                device="cpu", dtype="float32", threads=1, speculate="off",
                max_context=context + append_tokens + (repeats + 2) * tokens + 4 * DECODE_CHUNK_TOKENS,
            ),
        )  # fmt: skip
    capture = EmulatedCapture()
    engine = Engine(loaded.model, loaded.tokenizer, loaded.options, capture=capture)
    generator = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, config["vocab_size"], (context,), generator=generator).tolist()
    tool_result = torch.randint(0, config["vocab_size"], (append_tokens,), generator=generator).tolist()
    session = engine.new_session()
    session.append(prompt)
    mark = session.snapshot()
    for sampling in (GREEDY, SAMPLED):  # captures both steps before anything is timed
        session.generate(DECODE_CHUNK_TOKENS + 1, sampling, stop_ids=set())
        session.restore(mark)
    replay = engine.workspace(1).step(GREEDY, stop_width(0)).run

    def restore() -> None:
        session.restore(mark)

    def into_workspace() -> None:
        """The session's row copied into the captured step's workspace, as generate() leaves it."""
        session.restore(mark)
        session.generate(2, GREEDY, stop_ids=set())

    def calls(chunk: int, sampling: SamplingParams) -> Work:
        return restore, lambda: [
            session.generate(chunk, sampling, stop_ids=set()) for _ in range(tokens // chunk)
        ]

    paths = [
        (
            "the captured step, replayed in a bare loop",
            (into_workspace, lambda: [replay(None) for _ in range(tokens)]),
        ),
        (f"Session.generate, one call of {tokens} (greedy)", calls(tokens, GREEDY)),
        (f"Session.generate, calls of {DECODE_CHUNK_TOKENS} (greedy)", calls(DECODE_CHUNK_TOKENS, GREEDY)),
        (f"Session.generate, calls of {DECODE_CHUNK_TOKENS} (sampled)", calls(DECODE_CHUNK_TOKENS, SAMPLED)),
    ]
    scheduler = BatchScheduler(engine, SharedPrefix(engine, []), max_rows=1)
    conversation = Conversation(scheduler, prompt, 1, engine.max_context)
    try:
        conversation.generate([0], [DECODE_CHUNK_TOKENS], SAMPLED, set())  # admits and prefills
        # The scheduler's own thread dispatches its steps, which a mode on this thread would not see: timed only.
        on_scheduler = (restore, lambda: conversation.generate([0], [tokens], SAMPLED, set()))
        seconds = alternating_medians([work for _, work in paths] + [on_scheduler], repeats, capture)
    finally:
        conversation.close()
    rows = []
    for (name, work), (total, host) in zip(paths, seconds, strict=False):
        ops, outside = operations(work, capture)
        rows.append({"path": name, "per": "token", "us": total * 1e6 / tokens, "host_us": host * 1e6 / tokens,
                     "ops": ops / tokens, "ops_outside_step": outside / tokens})  # fmt: skip
    total, host = seconds[-1]
    rows.append({"path": "the batch scheduler (sampled), as the agent decodes", "per": "token",
                 "us": total * 1e6 / tokens, "host_us": host * 1e6 / tokens})  # fmt: skip
    uncaptured = Engine(loaded.model, loaded.tokenizer, loaded.options).new_session()
    uncaptured.append(prompt)
    uncaptured_mark = uncaptured.snapshot()
    turns = [
        ("an agent turn, appended by replays: a tool result, the first new token", session, mark),
        ("an agent turn, appended eagerly (no capture)", uncaptured, uncaptured_mark),
    ]
    works = [
        (
            lambda s=s, m=m: s.restore(m),
            lambda s=s: (s.append(tool_result), s.generate(1, GREEDY, stop_ids=set())),
        )
        for _, s, m in turns
    ]
    for before, work in works:  # captures the turn's pieces before anything is timed
        before()
        work()
    seconds = alternating_medians(works, repeats, capture)
    for (name, _, _), work, (total, host) in zip(turns, works, seconds, strict=True):
        ops, outside = operations(work, capture)
        rows.append({"path": name, "per": f"turn of {append_tokens} tokens", "us": total * 1e6,
                     "host_us": host * 1e6, "ops": ops, "ops_outside_step": outside})  # fmt: skip
    return rows


def current(rows: list[dict]) -> CurrentTable:
    return CurrentTable(
        key="host_overhead",
        title="Host overhead per token",
        section=SECTION,
        command="python -m benchmarks.host_overhead",
        machine=f"{tables.machine()}, 1 thread",
        date=tables.now(),
        columns=COLUMNS,
        rows=table_rows(rows),
        note="A tiny random model on the CPU with its decode step captured by the CPU stand-in for CUDA graphs, so "
        "the replays are the device's share and the rest the host's.",
    )


def table_rows(rows: list[dict]) -> list[list[str]]:
    def number(row: dict, key: str, digits: int) -> str:
        value = row.get(key, float("nan"))
        return "–" if value != value else f"{value:,.{digits}f}"  # NaN: not counted, or not comparable

    return [
        [r["path"], r["per"], number(r, "us", 0), number(r, "host_us", 0), number(r, "ops", 1),
         number(r, "ops_outside_step", 1)]
        for r in rows
    ]  # fmt: skip


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.host_overhead", description=__doc__)
    parser.add_argument(
        "--context",
        type=int,
        default=512,
        env_var="SQLSCOUT_BENCH_CONTEXT",
        help="prompt tokens before decoding",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=128,
        env_var="SQLSCOUT_BENCH_TOKENS",
        help="tokens decoded per path and run",
    )
    parser.add_argument(
        "--append-tokens",
        type=int,
        default=TOOL_RESULT_TOKENS,
        env_var="SQLSCOUT_BENCH_APPEND_TOKENS",
        help="tokens of the agent turn's tool result",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=7,
        env_var="SQLSCOUT_BENCH_REPEATS",
        help="timed runs per path, median kept",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tokens % DECODE_CHUNK_TOKENS or args.tokens < DECODE_CHUNK_TOKENS:
        parser.error(f"--tokens must be a multiple of {DECODE_CHUNK_TOKENS}, the scheduler's calls")
    print(f"measuring on {os.cpu_count()} cores, 1 thread", file=sys.stderr)
    rows = measure(args.context, args.tokens, args.append_tokens, args.repeats)
    table = current(rows)
    print(markdown_table(table.columns, table.rows))
    if not args.no_record:
        from benchmarks.model_results import record_section

        record_section(SECTION, _section(table, args))
        tables.record(table)
    return 0


def _section(table: CurrentTable, args) -> str:
    return "\n".join([
        f"{table.date}, {table.machine}, torch {torch.__version__}. A tiny random Qwen3.5 ({SHAPES['tiny']['hidden_size']} "
        f"hidden, {SHAPES['tiny']['num_hidden_layers']} layers) in fp32, {args.context} tokens of prompt, "
        f"{args.tokens} tokens decoded per path and run (median of {args.repeats}); the decode step captured by the "
        "CPU stand-in for CUDA graphs, which records the step's aten operations once and replays exactly them. "
        "`us`: each path's time per token; `us outside the step`: that time less the time its replays took, the "
        "host's work per token (Python, copies in and out of the workspace, sampling bookkeeping, the scheduler's "
        "queue), which a GPU's replays do not hide unless the host runs ahead. A replay's own time depends on the "
        "rows' state (the bare loop's row sits out at its length): the second column is the comparison. aten ops "
        "outside the step: operations dispatched per token besides the replays, each a kernel launch or a host "
        "wait on a GPU (not counted for the scheduler, whose own thread dispatches them). The agent turn appends "
        f"{args.append_tokens} tokens as replays of captured prefills of power-of-two pieces (the workspace's state "
        "copied in and the new positions copied back), against the same turn appended eagerly by an engine that "
        "captures nothing. Here the replayed turn takes longer in all, as the stand-in replays each recorded "
        "operation from Python and each piece attends over the whole workspace: on a GPU a replay is one launch, "
        "and the host's column is the comparison.",
        "",
        markdown_table(table.columns, table.rows),
    ])  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())

"""The weight products of a decode token at every instruction-set level this CPU runs (--cpu-isa's levels):
`python -m benchmarks.cpu_products [--threads N] [--no-record]`.

Each level runs in a process of its own (the kernels of one level per process), its kernels and torch's own capped
there as the engine caps them. A product is one row of fp32 activations against a Qwen3.5-2B MLP matrix
(6144 x 2048) stored as the engine stores it: bf16 tiles, int8, int4 or int6 rows. The peer, in the same process
and the same rounds, is torch's own product of the same bf16 matrix (F.linear, bf16 activations where the level
multiplies bf16 natively, else fp32 against the matrix widened once). GB/s counts the stored bytes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import configargparse

from benchmarks import tables
from benchmarks.model_results import record_section
from benchmarks.tables import CurrentTable, markdown_table

SHAPE = (6144, 2048)
KINDS = ("bfloat16", "int8", "int4", "int6")
ROUNDS = 7
CALLS = 40  # per round and product
SECTION = "CPU weight products per instruction set (`python -m benchmarks.cpu_products`)"


def measure(level: str, threads: int) -> dict:
    """GB/s of each stored kind's product and of torch's, the median of ROUNDS alternating rounds."""
    import torch
    import torch.nn.functional as F

    from kernels import cpu as cpu_kernels

    cpu_kernels.set_isa(level)
    from model.cpu import native_bf16
    from model.cpu_weights import cpu_linear, to_cpu_weight

    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    matrix = (torch.randn(*SHAPE, generator=generator) * 0.02).bfloat16()
    x = torch.randn(1, SHAPE[1], generator=generator)
    peer_dtype = torch.bfloat16 if native_bf16() else torch.float32
    peer_matrix, peer_x = matrix.to(peer_dtype), x.to(peer_dtype)
    products = {kind: (to_cpu_weight(matrix, kind), x) for kind in KINDS}

    def timed(function) -> float:
        function()
        started = time.perf_counter()
        for _ in range(CALLS):
            function()
        return (time.perf_counter() - started) / CALLS

    seconds: dict[str, list[float]] = {name: [] for name in (*KINDS, "torch")}
    with torch.inference_mode():
        for _ in range(ROUNDS):
            seconds["torch"].append(timed(lambda: F.linear(peer_x, peer_matrix)))
            for kind, (weight, inputs) in products.items():
                seconds[kind].append(timed(lambda weight=weight, inputs=inputs: cpu_linear(inputs, weight)))
    nbytes = {kind: weight.nbytes for kind, (weight, _) in products.items()} | {"torch": matrix.nbytes}
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    return {
        "level": level,
        "instructions": cpu_kernels.ops().instructions(),
        "peer_dtype": str(peer_dtype).removeprefix("torch."),
        "seconds": medians,
        "gb_per_s": {name: nbytes[name] / median / 1e9 for name, median in medians.items()},
    }


def current(results: list[dict], threads: int, date: str) -> CurrentTable:
    """GB/s of each stored kind at each level, with torch's product of the same matrix beside it."""
    rows = []
    for result in results:
        rates, seconds = result["gb_per_s"], result["seconds"]
        cells = [f"{rates[kind]:.1f} ({seconds['torch'] / seconds[kind]:.2f}x)" for kind in KINDS]
        rows.append(
            [
                result["level"],
                result["instructions"],
                f"{result['peer_dtype']}, {rates['torch']:.1f} GB/s",
                *cells,
            ]
        )
    return CurrentTable(
        key="cpu_products",
        title="CPU weight products per instruction set",
        section=SECTION,
        command="python -m benchmarks.cpu_products",
        machine=f"{tables.cpu_name()}, {threads} threads",
        date=date,
        columns=["level", "instructions", "torch peer", *(f"{kind} GB/s (x torch)" for kind in KINDS)],
        rows=rows,
    )


def report(table: CurrentTable) -> str:
    return "\n".join(
        [
            f"Machine: {table.machine}; date {table.date}. `python -m benchmarks.cpu_products`. One row of fp32 "
            f"activations against a {SHAPE[0]} x {SHAPE[1]} matrix as the engine stores it; the peer is torch's "
            "F.linear on the same bf16 matrix at the same level (bf16 activations where the level has native bf16, "
            "else fp32), measured in the same rounds. GB/s counts stored bytes (torch's: the bf16 matrix's); the ratio "
            "is torch's time over ours.",
            "",
            markdown_table(table.columns, table.rows),
        ]
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.cpu_products", description=__doc__)
    parser.add_argument(
        "--threads", type=int, default=2, env_var="SQLSCOUT_BENCH_THREADS", help="torch threads"
    )
    parser.add_argument("--level", help=configargparse.SUPPRESS)  # one level, in the process of its own
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.level:
        print(json.dumps(measure(args.level, args.threads)))
        return
    from kernels.cpu import isa

    results = []
    for level in ["native", *isa.runnable()]:
        print(f"measuring {level}", file=sys.stderr, flush=True)
        command = [
            sys.executable,
            "-m",
            "benchmarks.cpu_products",
            "--level",
            level,
            "--threads",
            str(args.threads),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"level {level} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    table = current(results, args.threads, tables.now())
    text = report(table)
    if not args.no_record:
        record_section(SECTION, text)
        tables.record(table)
    print(text)


if __name__ == "__main__":
    main()

"""The weight products of a decode token at every instruction-set level this CPU runs (--cpu-isa's levels):
`python -m benchmarks.cpu_products [--threads N] [--no-record]`.

Each level runs in a process of its own (the kernels of one level per process), its kernels and torch's own capped
there as the engine caps them. A product is one row of fp32 activations against a Qwen3.5-2B MLP matrix
(6144 x 2048) stored as the engine stores it: bf16 tiles, int8, int4 or int6 rows. The peer, in the same process
and the same rounds, is torch's own product of the same bf16 matrix (F.linear, bf16 activations where the level
multiplies bf16 natively, else fp32 against the matrix widened once). GB/s counts the stored bytes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def cpu_name() -> str:
    """The CPU's model name as Linux reports it, else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.machine()


def report(results: list[dict], threads: int) -> str:
    header = (
        "| level | instructions | torch peer | " + " | ".join(f"{k} GB/s (x torch)" for k in KINDS) + " |"
    )
    lines = [
        f"Machine: {cpu_name()}, {threads} threads; date "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}. `python -m benchmarks.cpu_products`. One row of "
        f"fp32 activations against a {SHAPE[0]} x {SHAPE[1]} matrix as the engine stores it; the peer is torch's "
        "F.linear on the same bf16 matrix at the same level (bf16 activations where the level has native bf16, "
        "else fp32), measured in the same rounds. GB/s counts stored bytes (torch's: the bf16 matrix's); the ratio "
        "is torch's time over ours.",
        "",
        header,
        "|---|---|---|" + "--:|" * len(KINDS),
    ]
    for result in results:
        rates, seconds = result["gb_per_s"], result["seconds"]
        cells = [f"{rates[kind]:.1f} ({seconds['torch'] / seconds[kind]:.2f}x)" for kind in KINDS]
        lines.append(
            f"| {result['level']} | {result['instructions']} | {result['peer_dtype']}, "
            f"{rates['torch']:.1f} GB/s | {' | '.join(cells)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_products", description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--level", help=argparse.SUPPRESS)  # one level, in the process of its own
    parser.add_argument("--no-record", action="store_true", help="print only, leave RESULTS.md as it is")
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
    text = report(results, args.threads)
    if not args.no_record:
        from benchmarks.model_results import record_section

        record_section(SECTION, text)
    print(text)


if __name__ == "__main__":
    main()

"""Run the kernel benchmarks: `python -m benchmarks.kernels --out DIR [--ops rms_norm,...] [--quick]`."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.kernels.harness import Measurement, measure, plot, table, write_csv

# Most important first: a time budget that runs out cuts the end of this list.
OPS = (
    "attention_decode",
    "attention_prefill",
    "gated_delta_rule",
    "rms_norm",
    "gated_rms_norm",
    "causal_conv1d",
    "swiglu",
    "rotary",
)


def run(
    ops: list[str], out_dir: Path, *, quick: bool, per_op_files: bool, budget_s: float | None = None
) -> list[Measurement]:
    """Measure each op in bf16 on the GPU; write a CSV and a PNG per op, or one of each for all ops."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    deadline = time.monotonic() + budget_s if budget_s else None
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[Measurement] = []
    for op in ops:
        module = importlib.import_module(f"benchmarks.kernels.{op}")
        measured = measure(module.cases(device, dtype, quick), deadline)
        if per_op_files:
            write_csv(measured, out_dir / f"{op}.csv")
            plot(measured, out_dir / f"{op}.png")
        results.extend(measured)
    if not per_op_files:
        write_csv(results, out_dir / "kernels.csv")
        plot(results, out_dir / "kernels.png")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--out", default=os.environ.get("SQLSCOUT_BENCH_OUT", "bench-out"), help="output folder"
    )
    parser.add_argument(
        "--ops", default=os.environ.get("SQLSCOUT_BENCH_OPS", ",".join(OPS)), help="comma-separated ops"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("SQLSCOUT_BENCH_QUICK") == "1",
        help="fewer shapes",
    )
    parser.add_argument(
        "--combined",
        action="store_true",
        default=os.environ.get("SQLSCOUT_BENCH_COMBINED") == "1",
        help="one CSV and one PNG for all ops instead of one per op",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        parser.error(f"unknown ops {unknown}; choose from {', '.join(OPS)}")
    results = run(ops, Path(args.out), quick=args.quick, per_op_files=not args.combined)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

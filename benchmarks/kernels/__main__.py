"""Run the kernel benchmarks: `python -m benchmarks.kernels --out DIR [--ops rms_norm,...] [--quick]`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from benchmarks.kernels.harness import table
from benchmarks.kernels.runner import OPS, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__)
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

"""Run the kernel benchmarks: `python -m benchmarks.kernels --out DIR [--ops rms_norm,...] [--quick]`; with
`--resources`, compile every kernel for sm_80 to sm_120 instead (no GPU needed) and print what each one uses."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import configargparse

from benchmarks import tables
from benchmarks.kernels import resources
from benchmarks.kernels.harness import table
from benchmarks.kernels.runner import OPS, run


def op_names(text: str) -> list[str]:
    """The comma-separated op names of --ops, each one of OPS."""
    ops = [op.strip() for op in text.split(",") if op.strip()]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise configargparse.ArgumentTypeError(f"unknown ops {unknown}; choose from {', '.join(OPS)}")
    return ops


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__)
    parser.add_argument("--out", default="bench-out", env_var="SQLSCOUT_BENCH_OUT", help="output folder")
    parser.add_argument(
        "--ops",
        type=op_names,
        default=",".join(OPS),
        env_var="SQLSCOUT_BENCH_OPS",
        help="comma-separated ops",
    )
    parser.add_argument("--quick", action="store_true", env_var="SQLSCOUT_BENCH_QUICK", help="fewer shapes")
    parser.add_argument(
        "--combined",
        action="store_true",
        env_var="SQLSCOUT_BENCH_COMBINED",
        help="one CSV and one PNG for all ops instead of one per op",
    )
    parser.add_argument(
        "--resources",
        action="store_true",
        env_var="SQLSCOUT_BENCH_RESOURCES",
        help="time nothing: compile every kernel at the model's shapes for each GPU target and print its "
        "registers, spills, shared memory, warps, stages and programs",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    if args.resources:
        rows = resources.measure()
        print(resources.table(rows))
        if not args.no_record:
            resources.FULL_TABLE.write_text(resources.full_table(rows))
            tables.record(resources.current(rows, tables.now()))
        return 0
    results = run(args.ops, Path(args.out), quick=args.quick, per_op_files=not args.combined)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

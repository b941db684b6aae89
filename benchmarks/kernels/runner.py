"""Runs the per-op kernel benchmarks and writes their CSV and PNG files."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import torch

from benchmarks.kernels.harness import Measurement, log, measure, past, plot, write_csv

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
        if past(deadline):
            log.warning("time budget spent: %s not measured", op)
            continue
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

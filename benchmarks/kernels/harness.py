"""Timing, achieved rates against the H200 ceilings, and the CSV / plot / table every kernel benchmark writes."""

from __future__ import annotations

import csv
import importlib
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

log = logging.getLogger("benchmarks.kernels")

# Ceilings measured on an H200 (device copy and dense bf16 matmul).
PEAK_BANDWIDTH = 4.3e12
PEAK_BF16_FLOPS = 790e12


@dataclass
class Case:
    """One shape of one op: the bytes it must move, the FLOPs it must do, and the implementations to time."""

    op: str
    shape: str
    bytes: float
    flops: float
    impls: dict[str, Callable[[], object]]
    baseline: str = "torch eager"


@dataclass
class Measurement:
    op: str
    shape: str
    impl: str
    ms: float
    tb_per_s: float
    tflop_per_s: float
    pct_bandwidth: float
    pct_flops: float
    speedup_vs_baseline: float = field(default=math.nan)


def optional_module(name: str):
    """The module if it imports (an optional peer such as liger_kernel or fla), else None."""
    try:
        return importlib.import_module(name)
    except Exception:  # any failure means the peer is absent on this machine
        return None


def compiled(fn: Callable) -> Callable:
    """torch.compile of fn; a failure to compile surfaces when the benchmark first calls it, and is skipped."""
    return torch.compile(fn, dynamic=True)


def time_ms(fn: Callable[[], object]) -> float:
    """Median time of fn in milliseconds (CUDA events through triton's do_bench; wall clock on a CPU)."""
    if torch.cuda.is_available():
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()
    samples = []
    for _ in range(5):
        begin = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - begin) * 1e3)
    return sorted(samples)[len(samples) // 2]


def past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def measure(cases: Iterable[Case], deadline: float | None = None) -> list[Measurement]:
    """Time every implementation of every case; an implementation that fails is logged and left out."""
    results = []
    for case in cases:
        if past(deadline):
            log.warning("time budget spent: %s from %s on not measured", case.op, case.shape)
            break
        timed = {}
        for impl, fn in case.impls.items():
            try:
                timed[impl] = time_ms(fn)
            except Exception as error:  # a peer that cannot run this shape is reported, not fatal
                log.warning(
                    "%s %s %s failed: %s", case.op, case.shape, impl, str(error).splitlines()[0][:200]
                )
        baseline_ms = timed.get(case.baseline, math.nan)
        for impl, ms in timed.items():
            seconds = ms * 1e-3
            tb = case.bytes / seconds / 1e12 if case.bytes else math.nan
            tf = case.flops / seconds / 1e12 if case.flops else math.nan
            results.append(
                Measurement(
                    op=case.op,
                    shape=case.shape,
                    impl=impl,
                    ms=ms,
                    tb_per_s=tb,
                    tflop_per_s=tf,
                    pct_bandwidth=100 * tb * 1e12 / PEAK_BANDWIDTH,
                    pct_flops=100 * tf * 1e12 / PEAK_BF16_FLOPS,
                    speedup_vs_baseline=baseline_ms / ms,
                )
            )
        log.info(
            "%s %s: %s", case.op, case.shape, ", ".join(f"{k} {v * 1e3:.1f} us" for k, v in timed.items())
        )
    return results


def write_csv(results: list[Measurement], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Measurement.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)


def plot(results: list[Measurement], path: Path) -> bool:
    """One panel per op: time per shape and implementation (log scale). False when matplotlib is missing."""
    if optional_module("matplotlib") is None or not results:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(r.op for r in results))
    columns = min(2, len(ops))
    rows = math.ceil(len(ops) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7 * columns, 3.6 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops, strict=False):
        mine = [r for r in results if r.op == op]
        shapes = list(dict.fromkeys(r.shape for r in mine))
        impls = list(dict.fromkeys(r.impl for r in mine))
        width = 0.8 / len(impls)
        for i, impl in enumerate(impls):
            by_shape = {r.shape: r.ms * 1e3 for r in mine if r.impl == impl}
            xs = [j + i * width for j, s in enumerate(shapes) if s in by_shape]
            ax.bar(xs, [by_shape[s] for s in shapes if s in by_shape], width, label=impl)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], shapes, fontsize=7, rotation=15)
        ax.set_yscale("log")
        ax.set_ylabel("time (us)")
        ax.set_title(op)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def table(results: list[Measurement]) -> str:
    """A Markdown table of every measurement, with rates against the H200 ceilings."""
    lines = [
        "| op | shape | impl | time (us) | TB/s (% of 4.3) | TFLOP/s (% of 790) | speedup vs eager |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        bandwidth = "" if math.isnan(r.tb_per_s) else f"{r.tb_per_s:.2f} ({r.pct_bandwidth:.0f}%)"
        flops = "" if math.isnan(r.tflop_per_s) else f"{r.tflop_per_s:.1f} ({r.pct_flops:.0f}%)"
        lines.append(
            f"| {r.op} | {r.shape} | {r.impl} | {r.ms * 1e3:.1f} | {bandwidth} | {flops} | "
            f"{r.speedup_vs_baseline:.2f}x |"
        )
    return "\n".join(lines)

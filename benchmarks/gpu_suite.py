"""One command for a GPU machine: kernel tests in bf16 and fp32, kernel benchmarks, the checks only a GPU can
make (graph replay vs eager, Triton vs torch at real shapes), a whole ask episode on a random checkpoint of the
real size, end-to-end decode, speculative decoding, and a kernel-by-kernel profile of the engine's passes.

`python -m benchmarks.gpu_suite --out DIR` writes summary.md, kernels.csv, kernels.png, kernel_tests.log,
gpu_checks.log/.json, gpu_ask.log/.json, model_decode.log/.json, speculative.log/.json, gpu_profile.log/.json and
current.json (its current table: `python -m benchmarks.tables --add DIR/current.json` records it) into DIR and prints the summary last, in under 9 minutes on an H200 (--budget: a step gets what is left of it when
that is less than its own limit).
Needs torch, triton, numpy, pytest and transformers (which writes the random checkpoints); matplotlib optional.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import configargparse
import torch

from benchmarks.gpu_current import gpu_table
from benchmarks.kernels.harness import Measurement
from benchmarks.kernels.runner import OPS, run
from benchmarks.tables import dumps

log = logging.getLogger("benchmarks.gpu_suite")
REPO = Path(__file__).resolve().parent.parent
MODEL_DECODE_MODULE = "benchmarks.model_decode"
GPU_CHECKS_MODULE = "benchmarks.gpu_checks"
GPU_ASK_MODULE = "benchmarks.gpu_ask"
SPECULATIVE_MODULE = "benchmarks.speculative"
PROFILE_MODULE = "benchmarks.gpu_profile"
# They build the C++ CPU kernels four times over (native and three other instruction sets): minutes of one core
# that CI's CPU machine spends anyway, and nothing a GPU checks.
CPU_KERNEL_TESTS = ("tests/kernels/test_weight_products.py", "tests/kernels/test_cpu_steps.py")
GPU_MODEL_TESTS = "tests/model/test_cuda.py"


def _run_logged(command: list[str], log_path: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run command from the repository root, output to log_path; (exit code or None on timeout, last line)."""
    log.info("running %s (limit %.0f s)", " ".join(command), timeout_s)
    with log_path.open("w") as handle:
        try:
            code = subprocess.run(
                command,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # keep the output of a run that is cut short
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    if code is None:
        with log_path.open("a") as handle:
            handle.write(f"\nstopped after {timeout_s:.0f} s\n")
    return code, lines[-1] if lines else ""


def _kernel_tests(out: Path, timeout_s: float) -> str:
    if timeout_s < 1:
        return "not run: the suite's time budget was spent"
    ignored = [f"--ignore={path}" for path in CPU_KERNEL_TESTS]
    # With the model's own GPU tests: the captured decode steps and appends against eager ones.
    command = [sys.executable, "-m", "pytest", "tests/kernels", GPU_MODEL_TESTS, "-q", "-p", "no:cacheprovider",
               *ignored]  # fmt: skip
    code, last = _run_logged(command, out / "kernel_tests.log", timeout_s)
    if code is None:
        return f"timed out after {timeout_s:.0f} s (see kernel_tests.log)"
    return f"{'passed' if code == 0 else 'FAILED'}: {last.strip('= ')}"


def _run_module(module: str, out: Path, timeout_s: float) -> str:
    """Run `python -m module --out OUT`, logged to OUT/<name>.log; its status and the log's last lines."""
    if timeout_s < 1:
        return "not run: the suite's time budget was spent"
    name = module.rsplit(".", 1)[-1]
    command = [sys.executable, "-m", module, "--out", str(out.resolve())]
    code, _ = _run_logged(command, out / f"{name}.log", timeout_s)
    status = "timed out" if code is None else "ok" if code == 0 else f"exit code {code}"
    tail = (out / f"{name}.log").read_text(errors="replace").strip().splitlines()[-12:]
    return status + "\n\n```\n" + "\n".join(tail) + "\n```"


def _condensed(results: list[Measurement]) -> str:
    """Per op and shape: Triton's time, the best peer, the ratio, and Triton's share of the H200 ceilings."""
    lines = [
        "| op | shape | triton (us) | best peer | peer (us) | peer / triton | TB/s (% of 4.3) | TFLOP/s (% of 790) |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    keys = list(dict.fromkeys((r.op, r.shape) for r in results))
    for op, shape in keys:
        rows = [r for r in results if (r.op, r.shape) == (op, shape)]
        mine = next((r for r in rows if r.impl.startswith("triton")), None)
        peers = [r for r in rows if not r.impl.startswith("triton")]
        if mine is None:
            continue
        best = min(peers, key=lambda r: r.ms) if peers else None
        bandwidth = "" if math.isnan(mine.tb_per_s) else f"{mine.tb_per_s:.2f} ({mine.pct_bandwidth:.0f}%)"
        flops = "" if math.isnan(mine.tflop_per_s) else f"{mine.tflop_per_s:.1f} ({mine.pct_flops:.0f}%)"
        peer = f"{best.impl} | {best.ms * 1e3:.1f} | {best.ms / mine.ms:.2f}x" if best else "- | - | -"
        lines.append(f"| {op} | {shape} | {mine.ms * 1e3:.1f} | {peer} | {bandwidth} | {flops} |")
    return "\n".join(lines)


def _machine() -> str:
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    import triton

    return (
        f"{gpu}; torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}"
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.gpu_suite",
        description=__doc__,
        formatter_class=configargparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", default="gpu-suite-out", env_var="SQLSCOUT_GPU_SUITE_OUT", help="output folder"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        env_var="SQLSCOUT_GPU_SUITE_FULL",
        help="every benchmark shape (16k prefills, 32k decode); may pass the 8-minute mark",
    )
    parser.add_argument(
        "--skip-tests",
        action="store_true",
        env_var="SQLSCOUT_GPU_SUITE_SKIP_TESTS",
        help="do not run tests/kernels first",
    )
    parser.add_argument(
        "--test-timeout",
        type=float,
        default=200.0,
        env_var="SQLSCOUT_GPU_SUITE_TEST_TIMEOUT",
        help="seconds for the kernel tests",
    )
    parser.add_argument(
        "--bench-budget",
        type=float,
        default=90.0,
        env_var="SQLSCOUT_GPU_SUITE_BENCH_BUDGET",
        help="seconds for the kernel benchmarks; what is left past it is not measured",
    )
    parser.add_argument(
        "--checks-timeout",
        type=float,
        default=120.0,
        env_var="SQLSCOUT_GPU_SUITE_CHECKS_TIMEOUT",
        help="seconds for graph replay vs eager and Triton vs torch at the real shapes",
    )
    parser.add_argument(
        "--ask-timeout",
        type=float,
        default=120.0,
        env_var="SQLSCOUT_GPU_SUITE_ASK_TIMEOUT",
        help="seconds for a whole ask episode on a random Qwen3.5-2B-size checkpoint",
    )
    parser.add_argument(
        "--model-timeout",
        type=float,
        default=120.0,
        env_var="SQLSCOUT_GPU_SUITE_MODEL_TIMEOUT",
        help="seconds for the end-to-end decode benchmark",
    )
    parser.add_argument(
        "--speculative-timeout",
        type=float,
        default=120.0,
        env_var="SQLSCOUT_GPU_SUITE_SPECULATIVE_TIMEOUT",
        help="seconds for speculative decoding of replayed episodes at the real size against the decode graph",
    )
    parser.add_argument(
        "--profile-timeout",
        type=float,
        default=90.0,
        env_var="SQLSCOUT_GPU_SUITE_PROFILE_TIMEOUT",
        help="seconds for the kernel-by-kernel profile of a decode step, an agent turn and a verify pass",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=540.0,
        env_var="SQLSCOUT_GPU_SUITE_BUDGET",
        help="seconds for the whole suite: a step gets what is left of them when that is less than its own limit",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "error: the GPU suite needs a CUDA device and torch sees none; on a CPU, run "
            "`python -m pytest tests/kernels` and `python -m benchmarks.model_cpu` instead",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def limit(own_s: float) -> float:
        return max(0.0, min(own_s, began + args.budget - time.monotonic()))

    tests = "skipped (--skip-tests)" if args.skip_tests else _kernel_tests(out, limit(args.test_timeout))
    log.info("kernel tests: %s", tests)
    bench_s = limit(args.bench_budget)  # run() takes a budget of 0 for none
    results = (
        run(list(OPS), out, quick=not args.full, per_op_files=False, budget_s=bench_s) if bench_s >= 1 else []
    )
    checks = _run_module(GPU_CHECKS_MODULE, out, limit(args.checks_timeout))
    ask = _run_module(GPU_ASK_MODULE, out, limit(args.ask_timeout))
    model = _run_module(MODEL_DECODE_MODULE, out, limit(args.model_timeout))
    speculative = _run_module(SPECULATIVE_MODULE, out, limit(args.speculative_timeout))
    profile = _run_module(PROFILE_MODULE, out, limit(args.profile_timeout))

    machine, date = _machine(), f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    summary = "\n".join(
        [
            "# GPU suite",
            "",
            f"Machine: {machine}; {date}. Total {time.monotonic() - began:.0f} s.",
            "",
            f"Kernel tests (tests/kernels but the C++ CPU kernels', fp32 and bf16 storage, and {GPU_MODEL_TESTS}): "
            f"{tests}",
            "",
            "## Kernels (bf16 storage, medians of triton.testing.do_bench)",
            "",
            _condensed(results),
            "",
            f"## Graph replay vs eager, Triton vs torch, Qwen3.5-2B shapes in bf16 ({GPU_CHECKS_MODULE})",
            "",
            checks,
            "",
            f"## An ask episode on a random Qwen3.5-2B-size checkpoint and the demo database ({GPU_ASK_MODULE})",
            "",
            "The local engine with decode graphs runs the whole protocol. Random weights write no tool calls, so "
            "each round takes the malformed-reply path and the episode ends with the forced answer; each reply "
            "is cut at a few hundred tokens (first line below), which bounds the episode's time.",
            "",
            ask,
            "",
            f"## End-to-end decode ({MODEL_DECODE_MODULE})",
            "",
            model,
            "",
            f"## Speculative decoding at the real size against the decode graph ({SPECULATIVE_MODULE})",
            "",
            "Replayed agent episodes stand in for the trained model's replies (their tokens are forced as the "
            "model's choices); verify passes and plain steps replay captured graphs.",
            "",
            speculative,
            "",
            f"## Where a decode step's, an agent turn's and a verify pass's device time goes ({PROFILE_MODULE})",
            "",
            profile,
            "",
        ]
    )
    (out / "summary.md").write_text(summary)
    # The suite runs on a machine of its own: its table comes back in out, for `python -m benchmarks.tables --add`.
    (out / "current.json").write_text(dumps(gpu_table(out, machine, date)))
    print(summary)
    passed = tests.startswith(("passed", "skipped")) and checks.startswith("ok") and ask.startswith("ok")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())

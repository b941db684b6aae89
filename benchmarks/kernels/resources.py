"""Registers, spills and shared memory of every Triton kernel at the Qwen3.5-2B shapes, per NVIDIA target, compiled
ahead of time without a GPU: the table of `python -m benchmarks.kernels --resources` (JSON from `python -m
benchmarks.kernels.resources`).

Each launch is one the model makes (batch-1 decode at 1k, 4k and 12k context; prefills of 2k and 8k tokens),
planned by the kernels' own launchers for the target (`kernels.ops.launch.planning`) on meta tensors laid out as
the model lays them out, then compiled with the specialisation Triton's JIT derives from such arguments
(16-byte-aligned pointers, integers divisible by 16, integers equal to 1 folded into constants). ptxas reports
registers and spills; its report is kept in Triton's cache beside the kernel, so a second run compiles nothing.
Needs TRITON_INTERPRET unset: interpreted kernels cannot be compiled.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import multiprocessing
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.cache import get_cache_manager

from benchmarks import tables
from benchmarks.kernels import shapes
from benchmarks.tables import RESULTS_DIR, CurrentTable
from kernels.ops import launch
from kernels.ops.attention_decode import attention_decode_triton
from kernels.ops.attention_prefill import attention_prefill_triton
from kernels.ops.causal_conv1d import causal_conv1d_triton
from kernels.ops.gated_delta_rule import gated_delta_rule_triton
from kernels.ops.gated_rms_norm import gated_rms_norm_triton
from kernels.ops.rms_norm import rms_norm_triton
from kernels.ops.rotary import rotary_embedding_triton
from kernels.ops.swiglu import swiglu_triton


@dataclass(frozen=True)
class Target:
    """A compile target and the card its programs column counts SMs of."""

    arch: str
    capability: int
    card: str
    multiprocessors: int

    @property
    def gpu(self) -> launch.Gpu:
        return launch.gpu_for(self.capability, self.multiprocessors)


FULL_TABLE = RESULTS_DIR / "kernel_resources.md"
TARGETS = (
    Target("sm_80", 80, "A100", 108),
    Target("sm_86", 86, "RTX 3090", 82),
    Target("sm_89", 89, "RTX 4090", 128),
    Target("sm_90", 90, "H200", 132),
    Target("sm_100", 100, "B200", 148),
    Target("sm_120", 120, "RTX 5090", 170),
)
DECODE_CONTEXTS = (1024, 4096, 12288)
PREFILL_TOKENS = (2048, 8192)
VERIFY_TOKENS = 9  # a speculative verify pass of the longest draft (8 tokens) and the token before it
# Every kernel a decode step launches must not spill; prefill launches may store this many bytes of spills.
SPILL_BOUND_BYTES = 64
PTXAS_REPORT = "sqlscout-ptxas-report.txt"

_TORCH_TO_TRITON = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.int64: "i64",
    torch.int32: "i32",
}


def _meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _model_calls(tokens: int, context: int, verify: bool = False) -> list[tuple[str, Callable[[], object]]]:
    """(label, call) for each kernel call of one forward step over `tokens` new tokens of a row whose cache holds
    `context` tokens, on meta tensors laid out as the model lays them out (views of its fused projections);
    verify: a speculative verify pass, whose GDN layers keep the state after each token."""
    t = tokens
    heads, kv_heads, head_dim = shapes.Q_HEADS, shapes.KV_HEADS, shapes.HEAD_DIM
    hidden, hidden_weight = _meta(1, t, shapes.HIDDEN), _meta(shapes.HIDDEN)
    # qkv_proj: per query head [query | gate], then keys and values; q_norm writes the query contiguously.
    qkv = _meta(1, t, 2 * heads * head_dim + 2 * kv_heads * head_dim)
    gate = qkv[..., : 2 * heads * head_dim].view(1, t, heads, 2 * head_dim)[..., head_dim:]
    query, head_weight = _meta(1, t, heads, head_dim), _meta(head_dim)
    positions, start = _meta(1, t, dtype=torch.int64), _meta(1, dtype=torch.int64)
    inv_freq = _meta(shapes.ROTARY_DIM // 2, dtype=torch.float32)
    k_cache, v_cache = (_meta(1, kv_heads, context + 1, head_dim) for _ in range(2))
    attention = attention_decode_triton if t == 1 else attention_prefill_triton
    gate_up = _meta(1, t, 2 * shapes.INTERMEDIATE)
    # in_proj: [conv channels | z | b | a]; q, k and v are views of the conv output.
    gdn_width = shapes.GDN_HEADS * shapes.GDN_HEAD_DIM
    in_proj = _meta(1, t, shapes.CONV_CHANNELS + gdn_width + 2 * shapes.GDN_HEADS)
    b, a = in_proj[..., -2 * shapes.GDN_HEADS :].split(shapes.GDN_HEADS, -1)
    conv_weight = _meta(shapes.CONV_CHANNELS, shapes.CONV_WIDTH)
    conv_state = _meta(1, shapes.CONV_CHANNELS, shapes.CONV_WIDTH - 1)
    q, k, v = (
        part.unflatten(-1, (shapes.GDN_HEADS, shapes.GDN_HEAD_DIM))
        for part in _meta(1, t, shapes.CONV_CHANNELS).split(gdn_width, -1)
    )
    A_log, dt_bias = (_meta(shapes.GDN_HEADS, dtype=torch.float32) for _ in range(2))
    state = _meta(1, shapes.GDN_HEADS, shapes.GDN_HEAD_DIM, shapes.GDN_HEAD_DIM, dtype=torch.float32)
    gdn_out, gdn_weight = _meta(1, t, shapes.GDN_HEADS, shapes.GDN_HEAD_DIM), _meta(shapes.GDN_HEAD_DIM)
    conv_trail = _meta(1, t, shapes.CONV_CHANNELS, shapes.CONV_WIDTH - 1) if verify else None
    state_trail = _meta(1, t, *state.shape[1:], dtype=torch.float32) if verify else None
    return [
        ("hidden", lambda: rms_norm_triton(hidden, hidden_weight, 1e-6, residual=hidden)),
        ("head", lambda: rms_norm_triton(query, head_weight, 1e-6)),
        ("", lambda: rotary_embedding_triton(query, positions, inv_freq)),
        ("", lambda: attention(query, k_cache, v_cache, gate, start, head_dim**-0.5)),
        ("", lambda: swiglu_triton(*gate_up.chunk(2, dim=-1))),
        (
            "",
            lambda: causal_conv1d_triton(
                in_proj[..., : shapes.CONV_CHANNELS], conv_weight, conv_state, trail=conv_trail
            ),
        ),
        ("", lambda: gated_delta_rule_triton(q, k, v, a, b, A_log, dt_bias, state, trail=state_trail)),
        ("", lambda: gated_rms_norm_triton(gdn_out, gdn_out, gdn_weight, 1e-6)),
    ]


def _scenarios() -> list[tuple[str, int, int]]:
    """(name, new tokens, cache length) of every forward step measured."""
    decode = [(f"decode {c // 1024}k", 1, c) for c in DECODE_CONTEXTS]
    verify = [(f"verify {VERIFY_TOKENS} at {c // 1024}k", VERIFY_TOKENS, c) for c in DECODE_CONTEXTS[1:2]]
    return decode + verify + [(f"prefill {n // 1024}k", n, n) for n in PREFILL_TOKENS]


def _kernel_name(kernel: triton.JITFunction) -> str:
    return kernel.__name__.removeprefix("_").removesuffix("_kernel")


def _specialise(kernel: triton.JITFunction, args: tuple, constexprs: dict) -> tuple[dict, dict, dict]:
    """(signature, constants, attributes) as Triton's JIT derives them from these arguments."""
    signature, constants, attrs = {}, dict(constexprs), {}
    runtime_args = iter(args)
    for index, name in enumerate(kernel.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        value = next(runtime_args)
        if isinstance(value, torch.Tensor):
            signature[name] = "*" + _TORCH_TO_TRITON[value.dtype]
            aligned = value.storage_offset() * value.element_size() % 16 == 0
        elif isinstance(value, float):
            signature[name], aligned = "fp32", False
        elif value is None or value == 1:
            signature[name], constants[name] = "constexpr", value
            continue
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            aligned = value % 16 == 0
        if aligned:
            attrs[(index,)] = [["tt.divisibility", 16]]
    return signature, constants, attrs


@dataclass(frozen=True)
class Job:
    """One compile: a kernel specialised for its arguments with one config, for one target."""

    module: str
    kernel: str
    signature: tuple
    constants: tuple
    attrs: tuple
    num_warps: int
    num_stages: int
    capability: int


@dataclass
class Row:
    """One kernel launch of the model on one target (the same compile across scenarios), and what it needs."""

    kernel: str
    variant: str
    scenarios: list[str]
    programs: list[int]
    target: str
    card: str
    shared_limit: int
    decode: bool
    warps: int
    stages: int
    config: dict
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    shared: int = 0
    error: str = ""


def _job(planned: launch.PlannedLaunch, capability: int) -> Job:
    constexprs = {**planned.constexprs, **planned.config.kwargs}
    signature, constants, attrs = _specialise(planned.kernel, planned.args, constexprs)
    return Job(
        module=planned.kernel.fn.__module__,
        kernel=planned.kernel.__name__,
        signature=tuple(signature.items()),
        constants=tuple(sorted(constants.items())),
        attrs=tuple(sorted((index, tuple(map(tuple, attr))) for index, attr in attrs.items())),
        num_warps=planned.config.num_warps,
        num_stages=planned.config.num_stages,
        capability=capability,
    )


def plan(targets: tuple[Target, ...] = TARGETS) -> tuple[list[Row], list[Job], list[int]]:
    """Every (launch, target) row in the model's order, the distinct compiles, and which compile each row reads."""
    rows: dict[tuple, Row] = {}
    jobs: dict[Job, int] = {}
    row_job: list[int] = []
    for target in targets:
        for scenario, tokens, context in _scenarios():
            for label, call in _model_calls(tokens, context, scenario.startswith("verify")):
                with launch.planning(target.gpu) as launches:
                    call()
                for planned in launches:
                    job = _job(planned, target.capability)
                    row = rows.get((job, label))
                    if row is None:
                        row = rows[(job, label)] = Row(
                            _kernel_name(planned.kernel), label, [], [], target.arch, target.card,
                            target.gpu.shared_bytes, scenario.startswith("decode"), planned.config.num_warps,
                            planned.config.num_stages, dict(planned.config.kwargs),
                        )  # fmt: skip
                        row_job.append(jobs.setdefault(job, len(jobs)))
                    row.scenarios.append(scenario)
                    row.programs.append(math.prod(planned.grid))
    return list(rows.values()), list(jobs), row_job


_PTXAS = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
    r".*?Used (?P<regs>\d+) registers",
    re.S,
)


def _compile(job: Job) -> dict:
    """Shared memory and the ptxas report (registers, spills) of one compile, from Triton's cache when it has them."""
    kernel = getattr(importlib.import_module(job.module), job.kernel)
    source = ASTSource(
        kernel, dict(job.signature), dict(job.constants), {k: list(map(list, v)) for k, v in job.attrs}
    )
    target = GPUTarget("cuda", job.capability, 32)
    options = {"num_warps": job.num_warps, "num_stages": job.num_stages}
    knobs.nvidia.dump_ptxas_log = True
    try:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            compiled = triton.compile(source, target=target, options=options)
        cache = get_cache_manager(compiled.hash)
        report = printed.getvalue()
        if "Used " not in report:
            stored = cache.get_file(PTXAS_REPORT)
            if stored:
                with open(stored) as file:
                    report = file.read()
            else:
                # Compiled before without its report kept (by a launch): compile once more, past the cache.
                knobs.compilation.always_compile = True
                try:
                    with contextlib.redirect_stdout(printed):
                        compiled = triton.compile(source, target=target, options=options)
                finally:
                    knobs.compilation.always_compile = False
                report = printed.getvalue()
        cache.put(report, PTXAS_REPORT, binary=False)
        found = _PTXAS.search(report)
        if found is None:
            return {"error": f"no ptxas report for {job.kernel}: {report[-500:]}"}
        return {
            "shared": compiled.metadata.shared,
            "registers": int(found["regs"]),
            "spill_stores": int(found["stores"]),
            "spill_loads": int(found["loads"]),
            "stack": int(found["stack"]),
        }
    except Exception as error:  # reported in the row: the tests fail with the compiler's message
        return {"error": f"{type(error).__name__}: {error}"[-2000:]}


def measure(targets: tuple[Target, ...] = TARGETS, workers: int | None = None) -> list[Row]:
    """Compile every launch for every target (in parallel, one process per core) and fill in the rows."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("unset TRITON_INTERPRET: kernels defined for the interpreter cannot be compiled")
    rows, jobs, row_job = plan(targets)
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers or os.cpu_count() or 1) as pool:
        results = pool.map(_compile, jobs, chunksize=1)
    for row, index in zip(rows, row_job, strict=True):
        for field, value in results[index].items():
            setattr(row, field, value)
    return rows


def table(rows: list[Row]) -> str:
    """A markdown table: one line per kernel launch and target, launches in the model's order."""
    order = {(row.kernel, row.variant): i for i, row in reversed(list(enumerate(rows)))}
    scenarios = [name for name, _, _ in _scenarios()]
    targets = [t.arch for t in TARGETS]
    lines = [
        "| kernel | shapes | target | regs | spill stores (B) | shared (B) | limit (B) | warps | stages | programs |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sorted(
        rows,
        key=lambda r: (
            order[(r.kernel, r.variant)],
            scenarios.index(r.scenarios[0]),
            targets.index(r.target),
        ),
    ):
        words = [row.kernel, f"({row.variant})" if row.variant else ""]
        name = " ".join(word for word in [*words, *(f"{k}={v}" for k, v in row.config.items())] if word)
        shapes_, programs = _scenario_list(row.scenarios), "/".join(map(str, row.programs))
        if row.error:
            lines.append(f"| {name} | {shapes_} | {row.target} | error: {row.error[:80]} |||||||")
            continue
        lines.append(
            f"| {name} | {shapes_} | {row.target} | {row.registers} | {row.spill_stores} | {row.shared} | "
            f"{row.shared_limit} | {row.warps} | {row.stages} | {programs} |"
        )
    return "\n".join(lines)


def full_table(rows: list[Row]) -> str:
    """results/kernel_resources.md: every kernel on every target, which RESULTS.md's section links to."""
    return (
        "# Kernel resources per GPU target, kernel by kernel\n\nWritten by `python -m benchmarks.kernels "
        "--resources`; the method and the reading are in\n[RESULTS.md](../RESULTS.md#kernel-resources-per-gpu-"
        f"target-python--m-benchmarkskernels---resources).\n\n{table(rows)}\n"
    )


def current(rows: list[Row], date: str) -> CurrentTable:
    """Per target: how many kernels and compiled variants, the most registers and shared memory any needs, and the
    spills of all of them together (the peer is the target's own limit)."""
    cells = []
    for target in dict.fromkeys(row.target for row in rows):
        mine = [row for row in rows if row.target == target and not row.error]
        failed = sum(1 for row in rows if row.target == target and row.error)
        cells.append(
            [
                target,
                str(len({row.kernel for row in mine})),
                str(len(mine)) + (f" ({failed} failed)" if failed else ""),
                str(max(row.registers for row in mine)),
                str(sum(row.spill_stores for row in mine)),
                f"{max(row.shared for row in mine):,}",
                f"{mine[0].shared_limit:,}",
            ]
        )
    return CurrentTable(
        key="kernel_resources",
        title="Kernel resources per GPU target",
        section="Kernel resources per GPU target (`python -m benchmarks.kernels --resources`)",
        command="python -m benchmarks.kernels --resources",
        machine=f"{tables.machine()}, ptxas (no GPU needed)",
        date=date,
        columns=[
            "target",
            "kernels",
            "compiled variants",
            "most registers",
            "spill stores (B)",
            "most shared (B)",
            "shared limit (B)",
        ],
        rows=cells,
    )


def _scenario_list(names: list[str]) -> str:
    """'decode 1k', 'decode 4k' -> 'decode 1k/4k'."""
    grouped: dict[str, list[str]] = {}
    for name in names:
        kind, size = name.split()
        grouped.setdefault(kind, []).append(size)
    return ", ".join(f"{kind} {'/'.join(sizes)}" for kind, sizes in grouped.items())


def main() -> int:
    print(json.dumps([asdict(row) for row in measure()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

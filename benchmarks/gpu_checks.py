"""Checks only a GPU can make, at Qwen3.5-2B shapes in bf16 with random weights: decode-graph replay against
eager decoding (tokens, next logits, every cache tensor), and the Triton kernels against an fp32 run of the torch
reference over a long prefill and decode steps, as close to it as the torch reference in bf16 is.

`python -m benchmarks.gpu_checks [--out DIR] [--shapes 2b|tiny] [--context 4096] [--new-tokens 64]` prints one
line per check, writes gpu_checks.json and exits 1 when a check fails. `--shapes tiny` runs the same code on a
CPU (both sides decode eagerly there, and Triton runs in its interpreter).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import configargparse
import torch

import kernels
from benchmarks.model_decode import GREEDY, SHAPES, build_checkpoint
from model.engine import Engine
from model.engine_options import EngineOptions

GRAPH_TOLERANCE = 1e-3
# A random model's logits are nearly level, so bf16 rounding alone makes two backends pick other greedy tokens
# (on an H200, Triton and the torch reference agreed on none of 64), after which their states part entirely. So
# the backends run the same tokens (Triton's choices forced into the others) and each is measured against the
# torch reference in fp32: Triton passes when it is at most BACKEND_MARGIN times as far from it as the torch
# reference in bf16 is, or within FP32_FLOOR where both run fp32 (a CPU).
BACKEND_MARGIN = 1.5
FP32_FLOOR = 1e-4


@dataclass
class Run:
    tokens: list[int]
    logits: torch.Tensor  # the next token's, after the last generated one went through the model
    caches: list[torch.Tensor]


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    ours, reference = ours.float(), reference.float()
    return ((ours - reference).norm() / reference.norm().clamp_min(1e-12)).item()


def decode(engine: Engine, prompt: list[int], new_tokens: int, forced: list[int] | None = None) -> Run:
    """Greedy decoding of new_tokens after prompt, or the forced tokens run as decode steps in its place."""
    session = engine.new_session(max_tokens=len(prompt) + new_tokens + 1)
    session.append(prompt)
    if forced is None:
        tokens = session.generate(new_tokens, GREEDY, stop_ids=set())[0]
        session.append([])  # runs the last generated token, so its logits and cache rows exist
    else:
        tokens = list(forced)
        for token in tokens:  # one decode step each, as generate() runs them
            session.append([token])
    cache = session.cache
    caches = [t.clone() for pair in cache.kv for t in pair] + [
        t.clone() for t in cache.conv + cache.recurrent
    ]
    return Run(tokens, session.last_logits.float().clone(), caches)


def _errors(ours: Run, reference: Run) -> tuple[float, float]:
    """(relative error of the next logits, the worst relative error of a cache tensor) of ours against reference."""
    caches = max(relative_error(a, b) for a, b in zip(ours.caches, reference.caches, strict=True))
    return relative_error(ours.logits, reference.logits), caches


def compare(name: str, ours: Run, reference: Run, tolerance: float) -> dict:
    """Tokens must agree; logits and caches within tolerance (relative, whole tensor)."""
    agree = next(
        (i for i, (a, b) in enumerate(zip(ours.tokens, reference.tokens, strict=True)) if a != b),
        len(ours.tokens),
    )
    logits, caches = _errors(ours, reference)
    passed = agree == len(reference.tokens) and logits <= tolerance and caches <= tolerance
    return {
        "check": name,
        "passed": passed,
        "tokens_agreeing": f"{agree} of {len(reference.tokens)}",
        "logits_relative_error": logits,
        "worst_cache_relative_error": caches,
        "tolerance": tolerance,
        "summary": f"tokens {agree} of {len(reference.tokens)}, logits rel. error {logits:.2e}, worst cache "
        f"{caches:.2e} (tolerance {tolerance:.0e})",
    }


def against_reference(name: str, ours: Run, peer: Run, reference: Run) -> dict:
    """ours and peer ran the same tokens as reference: ours passes when its logits and caches are at most
    BACKEND_MARGIN times as far from reference as peer's (or within FP32_FLOOR)."""
    logits, caches = _errors(ours, reference)
    peer_logits, peer_caches = _errors(peer, reference)
    logits_limit = max(BACKEND_MARGIN * peer_logits, FP32_FLOOR)
    caches_limit = max(BACKEND_MARGIN * peer_caches, FP32_FLOOR)
    return {
        "check": name,
        "passed": logits <= logits_limit and caches <= caches_limit,
        "logits_relative_error": logits,
        "worst_cache_relative_error": caches,
        "peer_logits_relative_error": peer_logits,
        "peer_worst_cache_relative_error": peer_caches,
        "summary": f"logits rel. error {logits:.2e} (allowed {logits_limit:.2e}), worst cache {caches:.2e} "
        f"(allowed {caches_limit:.2e}); the torch reference at Triton's precision: {peer_logits:.2e} and "
        f"{peer_caches:.2e}",
    }


def run(out_dir: str | Path | None = None, *, shapes: str = "2b", context: int = 4096, new_tokens: int = 64):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = SHAPES[shapes]
    max_context = context + new_tokens + 1
    with tempfile.TemporaryDirectory() as tmp:
        reference = build_checkpoint(config, Path(tmp), device, dtype)
        del reference  # only its files are needed: free the device memory before two engines load
        # Both decode the same one-token steps: an eager engine would otherwise draft and verify (speculate=auto).
        options = EngineOptions(
            device=device.type,
            dtype=str(dtype).removeprefix("torch."),
            max_context=max_context,
            speculate="off",
        )
        graph = Engine.load(tmp, replace(options, cuda_graph=True))
        eager = Engine.load(tmp, replace(options, cuda_graph=False))
        fp32 = Engine.load(tmp, replace(options, cuda_graph=False, dtype="float32"))
    prompt = torch.randint(0, config["vocab_size"], (context,), generator=torch.Generator().manual_seed(2))
    prompt = prompt.tolist()

    previous = kernels.get_backend()
    try:
        kernels.set_backend("triton")
        triton_eager = decode(eager, prompt, new_tokens)
        triton_graph = decode(graph, prompt, new_tokens)
        kernels.set_backend("torch")
        torch_eager = decode(eager, prompt, new_tokens, forced=triton_eager.tokens)
        reference = decode(fp32, prompt, new_tokens, forced=triton_eager.tokens)
    finally:
        kernels.set_backend(previous)
    results = [
        compare("graph replay vs eager (Triton)", triton_graph, triton_eager, GRAPH_TOLERANCE),
        against_reference(
            "Triton against the torch reference in fp32 (eager, the same tokens)",
            triton_eager,
            torch_eager,
            reference,
        ),
    ]
    report = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "shapes": shapes,
        "dtype": str(dtype),
        "context": context,
        "new_tokens": new_tokens,
        "graph_captured": graph.cuda_graph,
        "checks": results,
    }
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "gpu_checks.json").write_text(json.dumps(report, indent=2))
    return report


def render(report: dict) -> str:
    lines = [
        f"{report['device']}, {report['shapes']} shapes, {report['dtype']}, {report['context']}-token prefill "
        f"+ {report['new_tokens']} greedy steps; decode graph captured: {report['graph_captured']}"
    ]
    for c in report["checks"]:
        lines.append(f"{'passed' if c['passed'] else 'FAILED'}: {c['check']}: {c['summary']}")
    return "\n".join(lines)


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.gpu_checks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", env_var="SQLSCOUT_BENCH_OUT", help="folder for gpu_checks.json")
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="2b", env_var="SQLSCOUT_BENCH_SHAPES")
    parser.add_argument(
        "--context", type=int, default=4096, env_var="SQLSCOUT_BENCH_CONTEXT", help="prompt tokens"
    )
    parser.add_argument(
        "--new-tokens", type=int, default=64, env_var="SQLSCOUT_BENCH_NEW_TOKENS", help="greedy decode steps"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = run(args.out, shapes=args.shapes, context=args.context, new_tokens=args.new_tokens)
    print(render(report))
    return 0 if all(c["passed"] for c in report["checks"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the engine's device time goes, kernel by kernel, at Qwen3.5-2B shapes (random weights).

`python -m benchmarks.gpu_profile [--out DIR] [--context 4096] [--shapes 2b|tiny]` profiles (torch.profiler)
eager greedy decode steps, whose kernels take the time they take inside the captured graph, one agent turn
(append a 400-token tool result, then the first new token) and one verify pass of 5 tokens; it prints, per
phase, the wall time, the time the device was busy and the kernels that took the most of it. Then, without the
profiler, the wall time per token of decoding through the replayed step in one call and in the serving
scheduler's chunks, greedy and sampled, and through the batch scheduler itself, as the agent decodes. Writes
gpu_profile.json. On a CPU (`--shapes tiny`) the same code profiles the CPU ops instead, to check the script.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections import defaultdict
from pathlib import Path

import configargparse
import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.model_decode import GREEDY, SHAPES, TOOL_RESULT_TOKENS, build_checkpoint, timed
from model.cache import StateTrail
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.serving.conversation import Conversation
from model.serving.scheduler import DECODE_CHUNK_TOKENS, BatchScheduler
from model.serving.shared_prefix import SharedPrefix
from model.session import Session, Snapshot

STEPS = 16
TOP = 15
REPLAYED_TOKENS = 128
VERIFY_WIDTH = 5  # the pending token and a draft of 4, speculation's default
# Decoding through the captured step as one call, and in the chunks that the serving scheduler decodes between two
# looks at its callers, greedy and with the trained sampling settings (SamplingParams' defaults).
REPLAYED = (
    ("greedy, one call", REPLAYED_TOKENS, GREEDY),
    (f"greedy, calls of {DECODE_CHUNK_TOKENS}", DECODE_CHUNK_TOKENS, GREEDY),
    (f"sampled, calls of {DECODE_CHUNK_TOKENS}", DECODE_CHUNK_TOKENS, SamplingParams(seed=0)),
)


def _kernel_table(prof, device: torch.device, units: int) -> tuple[float, list[dict]]:
    """(device-busy microseconds per unit, the TOP kernels by time with their share) of a finished profile."""
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for event in prof.events():
        on_device = event.device_type == torch.autograd.DeviceType.CUDA
        if on_device != (device.type == "cuda") or (not on_device and event.cpu_parent is not None):
            continue  # on a CPU only top-level ops, so that nothing is counted twice
        micros = event.device_time if on_device else event.cpu_time
        times[event.name] += micros
        counts[event.name] += 1
    busy = sum(times.values())
    ranked = sorted(times, key=times.get, reverse=True)[:TOP]
    table = [
        {
            "kernel": name[:90],
            "us_per_unit": round(times[name] / units, 1),
            "calls_per_unit": round(counts[name] / units, 1),
            "share": round(times[name] / busy, 3),
        }
        for name in ranked
    ]
    return busy / units, table


def _profiled(device: torch.device, work, units: int) -> dict:
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        seconds, _ = timed(device, work)
    busy_us, kernels = _kernel_table(prof, device, units)
    return {"wall_us": round(seconds * 1e6 / units, 1), "busy_us": round(busy_us, 1), "kernels": kernels}


def _verify_pass(engine: Engine, session: Session):
    """A verify pass of VERIFY_WIDTH tokens in the session's row as the captured pass runs it (each position over
    the whole cache under its mask, the GDN states after each token kept): the function that runs it."""
    device = engine.device
    width = VERIFY_WIDTH
    trail = StateTrail(engine.config, 1, width, device, engine.dtype).resize(width)
    tokens = torch.full((1, width), 7, device=device)
    start = torch.tensor(session.processed_lengths, device=device)
    active = torch.ones(1, dtype=torch.bool, device=device)
    bounds = [session.cache.max_tokens] * width

    def verify() -> None:
        engine.model.verify(tokens, start, session.cache, step_bounds=bounds, trail=trail, active=active)

    verify()  # compiles the kernels of a T-token step
    return verify


def _ms_per_token(
    device: torch.device, session: Session, mark: Snapshot, chunk: int, sampling: SamplingParams
) -> float:
    """Wall milliseconds per token of REPLAYED_TOKENS decoded from mark in generate() calls of chunk tokens."""
    session.restore(mark)
    session.generate(chunk + 1, sampling, stop_ids=set())  # captures the step of this sampling mode
    session.restore(mark)

    def work() -> None:
        for _ in range(REPLAYED_TOKENS // chunk):
            session.generate(chunk, sampling, stop_ids=set())

    seconds, _ = timed(device, work)
    return round(seconds * 1000 / REPLAYED_TOKENS, 3)


def _scheduler_ms_per_token(engine: Engine, prompt: list[int]) -> float:
    """Wall milliseconds per token of REPLAYED_TOKENS sampled for one conversation of the batch scheduler, the
    agent's path to the engine (its thread decodes in calls of DECODE_CHUNK_TOKENS)."""
    scheduler = BatchScheduler(engine, SharedPrefix(engine, []), max_rows=1)
    conversation = Conversation(scheduler, prompt, 1, len(prompt) + 2 * REPLAYED_TOKENS + 8)
    sampling = SamplingParams(seed=0)
    try:
        conversation.generate([0], [DECODE_CHUNK_TOKENS], sampling, set())  # admits, prefills, captures
        seconds, _ = timed(
            engine.device, lambda: conversation.generate([0], [REPLAYED_TOKENS], sampling, set())
        )
    finally:
        conversation.close()
    return round(seconds * 1000 / REPLAYED_TOKENS, 3)


def run(out_dir: str | Path | None = None, *, context: int = 4096, shapes: str = "2b") -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = SHAPES[shapes]
    with tempfile.TemporaryDirectory() as tmp:
        build_checkpoint(config, Path(tmp), device, dtype)  # only its files are needed
        engine = Engine.load(
            tmp,
            EngineOptions(
                device=device.type,
                dtype=str(dtype).removeprefix("torch."),
                max_context=context + 2 * TOOL_RESULT_TOKENS + STEPS + 8,
                cuda_graph=False,
                speculate="off",
            ),
        )
    generator = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, config["vocab_size"], (context,), generator=generator).tolist()
    tool_result = torch.randint(0, config["vocab_size"], (TOOL_RESULT_TOKENS,), generator=generator).tolist()
    session = engine.new_session()
    session.append(prompt)
    at_prompt = session.snapshot()
    session.append(tool_result)  # compiles the kernels of both phases before anything is timed
    session.generate(4, GREEDY, stop_ids=set())
    session.restore(at_prompt)
    report = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "shapes": shapes,
        "context": context,
        # generate(n) runs n - 1 decode steps: the first token comes from the prompt's logits.
        "decode_step": _profiled(device, lambda: session.generate(STEPS + 1, GREEDY, stop_ids=set()), STEPS),
    }
    session.restore(at_prompt)
    report["agent_turn"] = _profiled(
        device, lambda: (session.append(tool_result), session.generate(1, GREEDY, stop_ids=set())), 1
    )
    session.restore(at_prompt)
    report["verify_pass"] = _profiled(device, _verify_pass(engine, session), 1)
    replaying = Engine(engine.model, engine.tokenizer, dataclasses.replace(engine.options, cuda_graph=True))
    session = replaying.new_session(max_tokens=engine.max_context)
    session.append(prompt)
    at_prompt = session.snapshot()
    report["replayed_ms_per_token"] = {
        name: _ms_per_token(device, session, at_prompt, chunk, sampling) for name, chunk, sampling in REPLAYED
    }
    report["replayed_ms_per_token"]["sampled, through the batch scheduler"] = _scheduler_ms_per_token(
        replaying, prompt
    )
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "gpu_profile.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def render(report: dict) -> str:
    lines = [f"{report['device']}, {report['shapes']} shapes, {report['context']} tokens of context, eager"]
    for phase in ("decode_step", "agent_turn", "verify_pass"):
        part = report[phase]
        lines.append(f"{phase}: wall {part['wall_us']} us, device busy {part['busy_us']} us")
        lines += [
            f"  {k['us_per_unit']:>9} us {k['share']:>6.1%} x{k['calls_per_unit']:<6} {k['kernel']}"
            for k in part["kernels"]
        ]
    lines.append("decoding through the replayed step, ms per token:")
    lines += [f"  {name}: {ms}" for name, ms in report["replayed_ms_per_token"].items()]
    return "\n".join(lines)


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.gpu_profile", description=__doc__)
    parser.add_argument("--out", env_var="SQLSCOUT_BENCH_OUT", help="also write gpu_profile.json here")
    parser.add_argument(
        "--context", type=int, default=4096, env_var="SQLSCOUT_BENCH_CONTEXT", help="tokens before the steps"
    )
    parser.add_argument(
        "--shapes", choices=sorted(SHAPES), default="2b", env_var="SQLSCOUT_BENCH_SHAPES", help="model size"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(render(run(args.out, context=args.context, shapes=args.shapes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

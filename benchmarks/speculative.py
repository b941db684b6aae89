"""What speculative decoding from the context buys at the real Qwen3.5-2B size on the CPU, against plain decoding in
the same run: `python -m benchmarks.speculative [--variants default int8]` prints one JSON report.

A random model's own text says nothing about acceptance, so the agent-episode benchmark's scripted episodes
stand in for the trained model's: recorded once through the agent on the demo database (the tool results are
real), then replayed at the real size, where the scripted replies are forced as the model's choices. Plain
decoding runs each reply token as one decode step; speculative decoding drafts from the context and verifies
with the real forward passes, the forced tokens standing in for the argmax. The two sessions alternate turn by
turn so that the machine's load falls on both alike. Also measured: random text (drafts rarely match), and the
cost of one verify pass of K + 1 tokens against one decode step at about 2k tokens of context.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.agent_episode import SCRIPTS, ForcedReplayPolicy
from benchmarks.real_size_checkpoint import real_size_checkpoint
from model.cache import StateTrail
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0)
VARIANTS = {"default": {}, "int8": {"quantize": "int8"}}
DRAFT_TOKENS = (1, 2, 4, 8)
CONTEXT = 2048  # tokens before the timed verify passes
RANDOM_TOKENS = 160
REPEATS = 6


def recorded_episodes(questions: list[str]) -> list[tuple[str, list[int], list[tuple[int, int]]]]:
    """(question id, every token id, (prompt length, reply length) per turn) of each scripted episode, run
    through the agent on the demo database with a tiny random model (only the token ids are kept)."""
    from benchmarks.eval.datasets import load_questions
    from benchmarks.random_checkpoint import write_tiny_checkpoint
    from dbtools.engines import open_database
    from mcp_server.agent import Agent, AgentConfig

    path = Path(tempfile.gettempdir()) / "sqlscout-bench-tiny-qwen35"
    if not (path / "config.json").exists():
        write_tiny_checkpoint(path, seed=0)
    engine = Engine.load(path, EngineOptions(device="cpu", speculate="off"))
    by_id = {q.question_id: q for q in load_questions("plain")}
    db = open_database(None)
    episodes = []
    try:
        for qid in questions:
            policy = ForcedReplayPolicy(engine, SCRIPTS[qid])
            Agent(db, policy, AgentConfig()).ask(by_id[qid].question, by_id[qid].evidence)
            run = policy.runs[0]
            # Each reply is its script's text and the end-of-turn token (see ForcedRun.complete).
            replies = [len(engine.tokenizer.encode(text)) + 1 for text in SCRIPTS[qid]]
            episodes.append((qid, run.ids, list(zip(run.turn_prompt_lengths, replies, strict=False))))
    finally:
        db.close()
    return episodes


def replay(engine: Engine, speculating: Engine, ids: list[int], turns: list[tuple[int, int]]) -> dict:
    """Decode seconds of one episode's replies, plain and speculative, turn by turn in alternation."""
    plain, fast = (e.new_session(1, len(ids) + 16) for e in (engine, speculating))
    plain_s = fast_s = 0.0
    done = 0  # tokens in both sessions, the pending last reply token included
    for start, reply_length in turns:
        for session in (plain, fast):
            session.append(ids[done:start])
        reply = ids[start : start + reply_length]
        began = time.perf_counter()
        # As generating it: the first reply token comes from the prompt's logits, the last stays pending.
        for token in reply[:-1]:
            plain.append([token])
        plain_s += time.perf_counter() - began
        began = time.perf_counter()
        emitted = fast.generate(len(reply), GREEDY, set(), forced=[reply])[0]
        fast_s += time.perf_counter() - began
        if emitted != reply:
            raise AssertionError("speculative decoding emitted other tokens than the replayed reply")
        plain.append(reply[-1:])  # untimed: the pending token, as the next append runs it in both
        fast.append([])
        done = start + reply_length
    tokens = sum(length for _, length in turns)
    stats = fast.speculation
    return {
        "reply_tokens": tokens,
        "plain_tokens_per_s": round(tokens / plain_s, 2),
        "speculative_tokens_per_s": round(tokens / fast_s, 2),
        "speedup": round(plain_s / fast_s, 3),
        **stats.as_dict(),
        "max_logit_difference": float((plain.last_logits - fast.last_logits).abs().max()),
    }


def random_text(engine: Engine, speculating: Engine, vocab: int) -> dict:
    """Decode tokens/s of random text (drafts rarely match), plain against speculative, alternated."""
    generator = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, vocab, (256,), generator=generator).tolist()
    text = torch.randint(0, vocab, (RANDOM_TOKENS,), generator=generator).tolist()
    plain, fast = (e.new_session(1, 1024) for e in (engine, speculating))
    for session in (plain, fast):
        session.append(prompt)
    plain_s = fast_s = 0.0
    for offset in range(0, RANDOM_TOKENS, 16):
        piece = text[offset : offset + 16]
        began = time.perf_counter()
        for token in piece:
            plain.append([token])
        plain_s += time.perf_counter() - began
        began = time.perf_counter()
        fast.generate(len(piece), GREEDY, set(), forced=[piece])
        fast.append([])
        fast_s += time.perf_counter() - began
    return {
        "tokens": RANDOM_TOKENS,
        "plain_tokens_per_s": round(RANDOM_TOKENS / plain_s, 2),
        "speculative_tokens_per_s": round(RANDOM_TOKENS / fast_s, 2),
        "ratio": round(plain_s / fast_s, 3),
        **fast.speculation.as_dict(),
    }


def verify_cost(engine: Engine) -> dict:
    """Median ms of one decode step and of one verify pass per draft length, at CONTEXT tokens, alternated."""
    model = engine.model
    session = engine.new_session(1, CONTEXT + 32)
    session.append(torch.randint(0, engine.config.vocab_size, (CONTEXT,)).tolist())
    cache = session.cache
    trail = StateTrail(engine.config, 1, max(DRAFT_TOKENS) + 1, engine.device, engine.dtype)
    start = torch.tensor([CONTEXT])
    rows = torch.zeros(1, dtype=torch.long)

    def step() -> None:
        model.forward(torch.tensor([[7]]), start, cache.prefix(CONTEXT + 1), logits_at=rows)

    def verify(width: int) -> None:
        tokens = torch.full((1, width), 7)
        model.forward(
            tokens, start, cache.prefix(CONTEXT + width), trail=trail.resize(width), logit_rows=rows
        )
        trail.keep_(cache, [0], [width // 2])

    times: dict[str, list[float]] = {"step": [], **{f"verify_{k}": [] for k in DRAFT_TOKENS}}
    with torch.inference_mode():
        step()
        for _ in range(REPEATS):
            for name in times:
                began = time.perf_counter()
                step() if name == "step" else verify(int(name.split("_")[1]) + 1)
                times[name].append(time.perf_counter() - began)
    step_ms = statistics.median(times["step"]) * 1000
    report = {"step_ms": round(step_ms, 1)}
    for k in DRAFT_TOKENS:
        ms = statistics.median(times[f"verify_{k}"]) * 1000
        report[f"verify_{k}_ms"] = round(ms, 1)
        report[f"verify_{k}_vs_step"] = round(ms / step_ms, 3)
    return report


def _speculating(engine: Engine, tokens: int) -> Engine:
    """An engine on the same weights that drafts up to `tokens` tokens from the context."""
    options = dataclasses.replace(engine.options, speculate="ngram", speculate_tokens=tokens)
    return Engine(engine.model, engine.tokenizer, options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speculative", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model", help="a Qwen3.5-2B-size directory (default: the random real-size checkpoint)"
    )
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument(
        "--speculate-tokens", type=int, nargs="+", default=[4], help="draft lengths to replay with"
    )
    parser.add_argument("--questions", nargs="+", default=list(SCRIPTS), choices=list(SCRIPTS))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    episodes = recorded_episodes(args.questions)
    model_dir = Path(args.model) if args.model else real_size_checkpoint()
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "date": time.strftime("%Y-%m-%d"),
        "text": "replayed scripted episodes stand in for the trained model's replies",
        "variants": {},
    }
    for variant in args.variants:
        options = EngineOptions(device="cpu", speculate="off", **VARIANTS[variant])
        engine = Engine.load(model_dir, options)
        result = {"verify_cost": verify_cost(engine), "episodes": {}}
        for tokens in args.speculate_tokens:
            speculating = _speculating(engine, tokens)
            result["episodes"][f"K={tokens}"] = {
                qid: replay(engine, speculating, ids, turns) for qid, ids, turns in episodes
            }
            print(json.dumps({variant: result}), file=sys.stderr)  # progress: each table as it is done
        speculating = _speculating(engine, args.speculate_tokens[0])
        result["random_text"] = random_text(engine, speculating, engine.config.vocab_size)
        report["variants"][variant] = result
        print(json.dumps({variant: result}), file=sys.stderr)
        del engine, speculating
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What speculative decoding from the context buys at the real Qwen3.5-2B size on the CPU, against plain decoding in
the same run: `python -m benchmarks.speculative [--variants default int8 int4]` prints one JSON report.

A random model's own text says nothing about acceptance, so the agent-episode benchmark's scripted episodes
stand in for the trained model's: recorded once through the agent on the demo database (the tool results are
real), then replayed at the real size, where the scripted replies are forced as the model's choices. Plain
decoding runs each reply token as one decode step; speculative decoding drafts from the context and verifies
with the real forward passes, the forced tokens standing in for the argmax. The two sessions alternate turn by
turn so that the machine's load falls on both alike. Also measured: random text (drafts rarely match), and the
cost of one verify pass of K + 1 tokens against one decode step at about 2k tokens of context.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import configargparse
import torch

from benchmarks import tables
from benchmarks.agent_episode import SCRIPTS, ForcedReplayPolicy
from benchmarks.model_decode import SHAPES, build_checkpoint, timed
from benchmarks.real_size_checkpoint import real_size_checkpoint
from benchmarks.tables import CurrentTable
from dbtools.cache import cache_dir
from model.cache import StateTrail
from model.engine import Engine
from model.engine_options import EngineOptions
from model.options import ENGINE_OPTIONS, add_options, pick
from model.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0)
VARIANTS = {"default": {}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}
DRAFT_TOKENS = (1, 2, 4, 8)
CONTEXT = 2048  # tokens before the timed verify passes
RANDOM_TOKENS = 160
REPEATS = 6
STEPS = 4  # plain decode steps timed together per repeat


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


def _replayed(session, tokens: list[int]) -> list[int]:
    """Speculative decoding of tokens as the session's choices (its drafts and passes run as they would)."""
    with session.decoding.replaying([tokens]):
        return session.generate(len(tokens), GREEDY, set())[0]


def _plain_decode(session, tokens: list[int]) -> float:
    """Seconds plain decoding takes for len(tokens) tokens at the session's length, which then holds them as if it
    had generated them, each run as one decode step. On a CPU that is the timed work (the first token comes from
    the prompt's logits, the last stays pending until the next append); where the engine captures its steps,
    the timed work is a captured generate() of as many tokens (its own argmax, which a random model's is), and
    the tokens then run untimed."""
    device = session.engine.device
    if not session.engine.cuda_graph:
        seconds, _ = timed(device, lambda: [session.append([token]) for token in tokens[:-1]])
        session.append(tokens[-1:])
        return seconds
    mark = session.snapshot()
    seconds, _ = timed(device, lambda: session.generate(len(tokens), GREEDY, set()))
    session.restore(mark)
    for token in tokens:
        session.append([token])
    return seconds


def replay(engine: Engine, speculating: Engine, ids: list[int], turns: list[tuple[int, int]]) -> dict:
    """Decode seconds of one episode's replies, plain and speculative, turn by turn in alternation."""
    plain, fast = (e.new_session(1, len(ids) + 16) for e in (engine, speculating))
    plain_s = fast_s = 0.0
    done = 0  # tokens in both sessions
    for start, reply_length in turns:
        for session in (plain, fast):
            session.append(ids[done:start])
        reply = ids[start : start + reply_length]
        plain_s += _plain_decode(plain, reply)
        seconds, emitted = timed(
            fast.engine.device,
            lambda reply=reply: _replayed(fast, reply),
        )
        fast_s += seconds
        if emitted != reply:
            raise AssertionError("speculative decoding emitted other tokens than the replayed reply")
        fast.append([])  # untimed: the pending last token, which the plain session took in above
        done = start + reply_length
    tokens = sum(length for _, length in turns)
    return {
        "reply_tokens": tokens,
        "plain_tokens_per_s": round(tokens / plain_s, 2),
        "speculative_tokens_per_s": round(tokens / fast_s, 2),
        "speedup": round(plain_s / fast_s, 3),
        **fast.speculation.as_dict(),
        # Both sessions ran the same tokens, as decode steps or verify passes: their next-token logits agree.
        "max_logit_difference": float((plain.last_logits - fast.last_logits).abs().max()),
    }


def all_episodes(episodes: dict[str, dict]) -> dict:
    """The decode phase of every replayed episode together: their reply tokens over their summed seconds (each
    episode's tokens over its tokens/s), plain and speculative."""
    tokens = sum(row["reply_tokens"] for row in episodes.values())
    plain_s = sum(row["reply_tokens"] / row["plain_tokens_per_s"] for row in episodes.values())
    fast_s = sum(row["reply_tokens"] / row["speculative_tokens_per_s"] for row in episodes.values())
    return {
        "reply_tokens": tokens,
        "plain_tokens_per_s": round(tokens / plain_s, 2),
        "speculative_tokens_per_s": round(tokens / fast_s, 2),
        "speedup": round(plain_s / fast_s, 3),
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
        plain_s += _plain_decode(plain, piece)
        seconds, _ = timed(fast.engine.device, lambda piece=piece: _replayed(fast, piece))
        fast_s += seconds
        fast.append([])
    return {
        "tokens": RANDOM_TOKENS,
        "plain_tokens_per_s": round(RANDOM_TOKENS / plain_s, 2),
        "speculative_tokens_per_s": round(RANDOM_TOKENS / fast_s, 2),
        "ratio": round(plain_s / fast_s, 3),
        **fast.speculation.as_dict(),
    }


def verify_cost(engine: Engine) -> dict:
    """Median ms of one plain decode step and of one verify pass per draft length, at CONTEXT tokens of context,
    alternated; where the engine captures its steps, both are replayed graphs (the passes those of a speculating
    engine's workspace, holding the same state)."""
    model = engine.model
    device = engine.device
    session = engine.new_session(1, CONTEXT + 64)
    session.append(torch.randint(0, engine.config.vocab_size, (CONTEXT,)).tolist())
    mark = session.snapshot()
    cache = session.cache
    trail = StateTrail(engine.config, 1, max(DRAFT_TOKENS) + 1, device, engine.dtype)
    start = torch.tensor([CONTEXT], device=device)
    rows = torch.zeros(1, dtype=torch.long, device=device)
    captured = None
    if engine.cuda_graph:
        captured = _speculating(engine, max(DRAFT_TOKENS)).verify_workspace(1)
        captured.capture_all()
        captured.cache.copy_prefix_(cache, CONTEXT)

    def steps() -> None:
        session.restore(mark)
        session.generate(STEPS + 1, GREEDY, set())  # the first token comes from the prefill's logits

    def verify(width: int) -> None:
        if captured is not None:
            captured.run([[7] * width], [CONTEXT], [True])
            captured.trail.keep_(captured.cache, [0], [width // 2])
            return
        tokens = torch.full((1, width), 7, device=device)
        model.verify(
            tokens,
            start,
            cache.prefix(CONTEXT + width),
            step_bounds=[CONTEXT + t + 1 for t in range(width)],
            trail=trail.resize(width),
            logit_rows=rows,
        )
        trail.keep_(cache, [0], [width // 2])

    times: dict[str, list[float]] = {"step": [], **{f"verify_{k}": [] for k in DRAFT_TOKENS}}
    with torch.inference_mode():
        steps()  # compiles kernels and captures the decode graph where the engine captures
        for _ in range(REPEATS):
            for name in times:
                work = steps if name == "step" else lambda name=name: verify(int(name.split("_")[1]) + 1)
                seconds, _ = timed(device, work)
                times[name].append(seconds / (STEPS if name == "step" else 1))
    step_ms = statistics.median(times["step"]) * 1000
    report = {"step_ms": round(step_ms, 2), "captured": engine.cuda_graph}
    for k in DRAFT_TOKENS:
        ms = statistics.median(times[f"verify_{k}"]) * 1000
        report[f"verify_{k}_ms"] = round(ms, 2)
        report[f"verify_{k}_vs_step"] = round(ms / step_ms, 3)
    return report


def _speculating(engine: Engine, tokens: int) -> Engine:
    """An engine on the same weights, capturing as it does, that drafts up to `tokens` tokens from the context."""
    options = dataclasses.replace(engine.options, speculate="ngram", speculate_tokens=tokens)
    return Engine(engine.model, engine.tokenizer, options, capture=engine.capture)


def _checkpoint(model: str | None, device: torch.device, scratch: Path) -> Path:
    """The given directory, or a random one of the real size: kept in the cache on a CPU, written to the scratch
    folder on a GPU (where transformers makes it on the device in seconds)."""
    if model:
        return Path(model)
    if device.type == "cpu":
        return real_size_checkpoint()
    build_checkpoint(SHAPES["2b"], scratch, device, torch.bfloat16)
    torch.cuda.empty_cache()
    return scratch


def render(report: dict) -> str:
    """The report's tables as text."""
    lines = [f"{report['machine']}, {report['date']}: {report['text']}"]
    for variant, result in report["variants"].items():
        cost = result["verify_cost"]
        verify = ", ".join(f"K={k}: {cost[f'verify_{k}_vs_step']}x" for k in DRAFT_TOKENS)
        lines.append(
            f"{variant}: one step {cost['step_ms']} ms; a verify pass of K + 1 tokens against it: {verify}"
        )
        for tokens, episodes in result["episodes"].items():
            for qid, row in episodes.items():
                lines.append(
                    f"  {tokens} {qid}: {row['reply_tokens']} tokens, {row['plain_tokens_per_s']} -> "
                    f"{row['speculative_tokens_per_s']} tokens/s ({row['speedup']}x), "
                    f"{row['accepted_per_pass']} accepted per pass"
                )
            total = all_episodes(episodes)
            lines.append(
                f"  {tokens} all episodes: {total['reply_tokens']} tokens, {total['plain_tokens_per_s']} -> "
                f"{total['speculative_tokens_per_s']} tokens/s ({total['speedup']}x)"
            )
        noise = result["random_text"]
        lines.append(
            f"  random text: {noise['plain_tokens_per_s']} -> {noise['speculative_tokens_per_s']} tokens/s "
            f"({noise['ratio']}x), {noise['verify_passes']} verify passes"
        )
    return "\n".join(lines)


def current(report: dict) -> CurrentTable:
    """Plain against speculative decoding over all replayed episodes, per variant and draft length; the README's
    headline: each variant at its first draft length."""
    rows, headline = [], []
    for variant, result in report["variants"].items():
        for tokens, episodes in result["episodes"].items():
            total = all_episodes(episodes)
            rows.append(
                [
                    variant,
                    tokens.removeprefix("K="),
                    f"{total['plain_tokens_per_s']:.2f}",
                    f"{total['speculative_tokens_per_s']:.2f}",
                    f"{total['speedup']:.2f}x",
                ]
            )
    firsts = [next(row for row in rows if row[0] == variant) for variant in report["variants"]]
    headline.append(
        [
            f"speculative decoding of agent replies ({' / '.join(row[0] for row in firsts)} weights)",
            report["machine"],
            " / ".join(row[3] for row in firsts) + " tokens/s",
            "plain decoding " + " / ".join(row[2] for row in firsts),
            " / ".join(row[4] for row in firsts),
        ]
    )
    return CurrentTable(
        key="speculative",
        title="Speculative decoding at the real size",
        section="Speculative decoding at the real Qwen3.5-2B size (CPU) (`python -m benchmarks.speculative`)",
        command="python -m benchmarks.speculative",
        machine=report["machine"],
        date=report["date"],
        columns=["weights", "K", "plain tokens/s", "speculative tokens/s", "speed-up"],
        rows=rows,
        note="The replayed episodes' reply tokens over their decode time; the same tokens either way.",
        headline=headline,
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.speculative", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model",
        env_var="SQLSCOUT_BENCH_MODEL",
        help="a Qwen3.5-2B-size directory (default: a random checkpoint of the real size)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        env_var="SQLSCOUT_BENCH_VARIANTS",
        help="engine variants (default: all on a CPU, the default on a GPU)",
    )
    parser.add_argument(
        "--speculate-tokens",
        type=int,
        nargs="+",
        default=[4],
        env_var="SQLSCOUT_BENCH_SPECULATE_TOKENS",
        help="the draft lengths to replay with",
    )
    parser.add_argument(
        "--questions",
        nargs="+",
        default=list(SCRIPTS),
        choices=list(SCRIPTS),
        env_var="SQLSCOUT_BENCH_QUESTIONS",
        help="scripted demo questions to replay",
    )
    add_options(parser, pick(ENGINE_OPTIONS, "device"), "the engine")
    parser.add_argument(
        "--out", env_var="SQLSCOUT_BENCH_OUT", help="also write speculative.json into this folder"
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    variants = args.variants or (list(VARIANTS) if device.type == "cpu" else ["default"])
    episodes = recorded_episodes(args.questions)
    machine = (
        torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or platform.machine()
    )
    report = {
        "machine": f"{machine}, {os.cpu_count()} cores, torch {torch.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "text": "replayed scripted episodes stand in for the trained model's replies",
        "variants": {},
    }
    scratch = tempfile.TemporaryDirectory()
    model_dir = _checkpoint(args.model, device, Path(scratch.name))
    for variant in variants:
        # Quantized weights kept where the CPU benchmark keeps them: quantizing int4 again takes minutes.
        options = EngineOptions(
            device=device.type, speculate="off", cache_dir=cache_dir() / "engine", **VARIANTS[variant]
        )
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
    scratch.cleanup()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "speculative.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(render(report))
    if not args.no_record:
        tables.record(current(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

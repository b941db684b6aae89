"""Many questions at once against the same questions one after another, on (a) a scripted OpenAI-compatible
endpoint that takes a fixed time per completion and (b) the local engine on a small random checkpoint with
replayed completions (each reply decoded token by token in the shared batch, as generating it would cost).

N questions (the scripted demo questions of benchmarks.agent_episode, in turn) arrive together; they are
answered by one ModelRunner at once, then by the same runner one after another. Reported per N: questions per
minute and p50/p95 latency from the common arrival, with the ratios together / one by one. Usage:
`python -m benchmarks.concurrency [--sizes 1 4 16] [--completion-s 1.0] [--skip-local]`.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from pathlib import Path

import configargparse

from benchmarks import tables
from benchmarks.agent_episode import SCRIPTS, checkpoint
from benchmarks.concurrency.load import LoadResult, one_by_one, together
from benchmarks.concurrency.scripted_endpoint import ScriptedEndpoint
from benchmarks.eval.datasets import load_questions
from benchmarks.tables import RESULTS_DIR, CurrentTable
from dbtools.engines import open_database
from mcp_server.model_runner import ModelRunner
from mcp_server.settings import Settings
from model.options import ENGINE_OPTIONS, add_options, pick


def scripted_questions():
    """The demo questions that have scripts, in a fixed order, and a lookup of a prompt's script."""
    by_id = {q.question_id: q for q in load_questions("plain")}
    questions = [by_id[question_id] for question_id in SCRIPTS]

    def script_for(prompt: str) -> list[str]:
        # The last match: the question is in the user turn, after the system turn.
        found = max(questions, key=lambda q: prompt.rfind(f"Question: {q.question}"))
        return SCRIPTS[found.question_id]

    return questions, script_for


def measure(runner: ModelRunner, questions, sizes: list[int]) -> list[dict]:
    """For each N: the N questions one after another, then at once (each after a warm-up question)."""

    def ask(number: int) -> None:
        question = questions[number % len(questions)]
        answer = runner.ask(question.question, question.evidence)
        if answer.ending != "submit_sql":
            raise RuntimeError(
                f"{question.question_id} ended with {answer.ending}, not its scripted submit_sql"
            )

    ask(0)
    rows = []
    for size in sizes:
        alone = one_by_one(ask, size)
        shared = together(ask, size)
        rows.append(_row(size, alone, shared))
        print(_line(rows[-1]), file=sys.stderr)
    return rows


def _row(size: int, alone: LoadResult, shared: LoadResult) -> dict:
    return {
        "questions": size,
        "one_by_one": alone.to_dict(),
        "together": shared.to_dict(),
        "throughput_ratio": round(shared.per_minute / alone.per_minute, 2),
        "p50_ratio": round(shared.p50_s / alone.p50_s, 2),
        "p95_ratio": round(shared.p95_s / alone.p95_s, 2),
    }


def _line(row: dict) -> str:
    alone, shared = row["one_by_one"], row["together"]
    return (
        f"N={row['questions']:>3}  one by one {alone['questions_per_minute']:>7.1f} q/min "
        f"p50 {alone['p50_s']:>6.2f} s p95 {alone['p95_s']:>6.2f} s  |  together "
        f"{shared['questions_per_minute']:>7.1f} q/min p50 {shared['p50_s']:>6.2f} s p95 {shared['p95_s']:>6.2f} s"
        f"  |  x{row['throughput_ratio']:.2f} q/min, p50 x{row['p50_ratio']:.2f}, p95 x{row['p95_ratio']:.2f}"
    )


def endpoint_scenario(db, sizes: list[int], completion_s: float) -> dict:
    questions, script_for = scripted_questions()

    def reply_for(prompt: str, turn: int) -> str:
        script = script_for(prompt)
        return script[turn] if turn < len(script) else ""

    with ScriptedEndpoint(reply_for, completion_s) as endpoint:
        settings = Settings(
            endpoint=endpoint.url, endpoint_model="scripted", max_concurrent_questions=max(sizes)
        )
        runner = ModelRunner(settings, db)
        rows = measure(runner, questions, sizes)
    return {"setting": {"completion_s": completion_s, "max_concurrent_questions": max(sizes)}, "rows": rows}


def local_scenario(db, sizes: list[int], model: str | None, device: str) -> dict:
    from benchmarks.agent_episode import MID_SIZE_CONFIG
    from benchmarks.concurrency.replayed_local import ReplayedLocalPolicy
    from mcp_server.agent.prompts import load_prompts
    from model.engine import Engine
    from model.engine_options import EngineOptions

    path = checkpoint(model)
    engine = Engine.load(path, EngineOptions(device=device, max_batch_rows=max(sizes)))
    questions, script_for = scripted_questions()
    policy = ReplayedLocalPolicy(engine, script_for, load_prompts(path))
    settings = Settings(max_concurrent_questions=max(sizes), max_batch_rows=max(sizes))
    runner = ModelRunner(settings, db, policy)
    rows = measure(runner, questions, sizes)
    return {
        "setting": {
            "model": str(model or "mid-size random Qwen3.5"),
            "text_config": None if model else MID_SIZE_CONFIG,
            "device": engine.device.type,
            "dtype": str(engine.dtype).removeprefix("torch."),
            "max_batch_rows": max(sizes),
        },
        "rows": rows,
    }


def current(report: dict) -> CurrentTable:
    """Questions per minute and p95 latency, one after another against together, for each model measured."""
    rows = []
    for scenario, label in (("endpoint", "scripted endpoint"), ("local", "local engine, replayed replies")):
        for row in report.get(scenario, {}).get("rows", []):
            alone, together = row["one_by_one"], row["together"]
            rows.append(
                [
                    label,
                    str(row["questions"]),
                    f"{alone['questions_per_minute']:.1f}",
                    f"{together['questions_per_minute']:.1f}",
                    f"{row['throughput_ratio']:.2f}x",
                    f"{alone['p95_s']:.2f}",
                    f"{together['p95_s']:.2f}",
                    f"{row['p95_ratio']:.2f}x",
                ]
            )
    return CurrentTable(
        key="concurrency",
        title="Many questions at once",
        section="Many questions at once (`python -m benchmarks.concurrency`)",
        command="python -m benchmarks.concurrency",
        machine=report["machine"],
        date=report["date"],
        columns=[
            "model",
            "N",
            "one by one q/min",
            "together q/min",
            "q/min speed-up",
            "one by one p95 s",
            "together p95 s",
            "p95 ratio",
        ],
        rows=rows,
        note=f"N questions arriving together; the scripted endpoint answers each completion after "
        f"{report.get('endpoint', {}).get('setting', {}).get('completion_s', 1.0):g} s.",
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.concurrency", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=int,
        default=[1, 4, 16],
        env_var="SQLSCOUT_BENCH_SIZES",
        help="numbers of questions arriving together (a variable lists them as [1, 4, 16])",
    )
    parser.add_argument(
        "--completion-s",
        type=float,
        default=1.0,
        env_var="SQLSCOUT_BENCH_COMPLETION_S",
        help="seconds the scripted endpoint takes per completion",
    )
    parser.add_argument(
        "--local-sizes",
        nargs="+",
        type=int,
        default=None,
        env_var="SQLSCOUT_BENCH_LOCAL_SIZES",
        help="numbers of questions for the local engine (default: --sizes)",
    )
    parser.add_argument("--skip-endpoint", action="store_true", env_var="SQLSCOUT_BENCH_SKIP_ENDPOINT")
    parser.add_argument("--skip-local", action="store_true", env_var="SQLSCOUT_BENCH_SKIP_LOCAL")
    parser.add_argument(
        "--model",
        env_var="SQLSCOUT_BENCH_MODEL",
        help="model directory (default: a mid-size random checkpoint)",
    )
    add_options(parser, pick(ENGINE_OPTIONS, "device"), "the engine")
    parser.add_argument(
        "--out", default=str(RESULTS_DIR), env_var="SQLSCOUT_BENCH_OUT", help="folder for concurrency.json"
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.sizes + (args.local_sizes or [])) < 1:
        parser.error("every size must be at least 1")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": tables.now(),
        "questions": list(SCRIPTS),
    }
    db = open_database(None)
    try:
        if not args.skip_endpoint:
            print(f"scripted endpoint, {args.completion_s:g} s per completion", file=sys.stderr)
            report["endpoint"] = endpoint_scenario(db, args.sizes, args.completion_s)
        if not args.skip_local:
            print("local engine, replayed completions", file=sys.stderr)
            report["local"] = local_scenario(db, args.local_sizes or args.sizes, args.model, args.device)
    finally:
        db.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "concurrency.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out / 'concurrency.json'}", file=sys.stderr)
    if not args.no_record:
        tables.record(current(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

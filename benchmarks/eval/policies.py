"""Where the evaluation's completions come from: one shared model policy, or a scripted replay per question."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.eval.datasets import EvalQuestion
from benchmarks.eval.datasets.records import read_records
from mcp_server.agent.policies import Policy, build_policy
from model.engine_options import EngineOptions


def read_replay_scripts(path: str | Path) -> dict[str, list[list[str]]]:
    """Scripted replies by question id, from JSON lines of {"question_id", "replies": [turn, ...]} or
    {"question_id", "samples": [[turn, ...], ...]} (one script per sample)."""
    scripts = {}
    for record in read_records(path):
        question_id = str(record.get("question_id"))
        if "samples" in record:
            scripts[question_id] = [list(map(str, s)) for s in record["samples"]]
        elif "replies" in record:
            scripts[question_id] = [list(map(str, record["replies"]))]
        else:
            raise ValueError(f"{path}: the script for question {question_id} needs 'replies' or 'samples'")
    return scripts


def policy_source(
    questions: list[EvalQuestion],
    *,
    model_dir: str | None,
    endpoint: str | None,
    endpoint_model: str | None,
    api_key: str | None,
    device: str | None,
    replay: str | None,
) -> Callable[[EvalQuestion], Policy]:
    """A function giving each question its policy.

    A replay needs a model directory only for its tokenizer, chat template and prompts (so token counts and
    the prompt text are the real ones); the weights are not loaded.
    """
    if replay is None:
        policy = build_policy(
            model_dir=model_dir,
            endpoint=endpoint,
            endpoint_model=endpoint_model,
            api_key=api_key,
            engine_options=EngineOptions(device=device),
        )
        return lambda question: policy
    if model_dir is None:
        raise ValueError(
            "--replay needs --model DIR for the tokenizer and chat template it counts and renders with"
        )
    from mcp_server.agent.policies.replay import ReplayPolicy
    from mcp_server.agent.prompts import load_prompts
    from model.tokenizer import Tokenizer

    scripts = read_replay_scripts(replay)
    missing = [q.question_id for q in questions if q.question_id not in scripts]
    if missing:
        raise ValueError(f"{replay} has no script for question(s) {', '.join(missing[:10])}")
    tokenizer = Tokenizer.from_model_dir(model_dir)
    prompts = load_prompts(model_dir)
    return lambda question: ReplayPolicy.with_tokenizer(scripts[question.question_id], tokenizer, prompts)

"""A whole `ask` episode on a random checkpoint of the Qwen3.5-2B size, on the bundled demo database: the local
engine (decode graphs on a GPU) runs the protocol as the server does, from the chat template through prefill,
captured decode, reply parsing and the tools to the final SQL. Random weights write no tool calls, so every
round takes the malformed-reply path (a format reminder), then the forced final answer.

`python -m benchmarks.gpu_ask [--out DIR] [--shapes 2b|tiny] [--turn-tokens 256]` prints whether the episode
completed (rounds, tool calls, tokens, ending, wall time, tokens/s), writes gpu_ask.json and exits 1 when it
did not. A random model never ends its turn, so each reply stops after --turn-tokens tokens: the episode
generates at most (rounds + 1) x that many. `--shapes tiny` runs it on a CPU (decode graphs off there).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

import configargparse
import torch

from benchmarks.model_decode import SHAPES, build_checkpoint
from benchmarks.random_checkpoint import write_tokenizer_files
from dbtools.engines import open_database
from mcp_server.agent import Agent, AgentAnswer, AgentConfig
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.policies.local import LocalPolicy, LocalRun
from mcp_server.agent.prompts import Prompts, load_prompts
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent

log = logging.getLogger("benchmarks.gpu_ask")
QUESTION = "Which five customers in Germany spent the most?"
ENDINGS = ("submit_sql", "answer", "forced_answer", "fallback", "no_sql")
TURN_TOKENS = 256


class TurnCappedRun(LocalRun):
    """A question's rows on the shared batch whose replies stop after the policy's turn_tokens tokens."""

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        limits = [min(limit, self._policy.turn_tokens) for limit in max_new_tokens]
        return super().complete(rows, limits, sampling, cancel)


class TurnCappedPolicy(LocalPolicy):
    """The local engine with each reply cut at turn_tokens tokens."""

    def __init__(self, engine: Engine, prompts: Prompts, turn_tokens: int) -> None:
        super().__init__(engine, prompts)
        self.turn_tokens = turn_tokens

    def start(self, prompt: str, samples: int, max_tokens: int) -> TurnCappedRun:
        return TurnCappedRun(self, prompt, samples, max_tokens)


def episode_report(answer: AgentAnswer) -> dict:
    """What the episode did, from its trace: rounds, calls, tokens, model time and how it ended."""
    trace = answer.chosen.trace
    rounds = trace.rounds
    model_s = sum(r.model_ms for r in rounds) / 1000
    return {
        "rounds": len(rounds),
        "round_kinds": [r.kind for r in rounds],
        "tool_calls": sum(len(r.calls) for r in rounds),
        "malformed_calls": sum(r.malformed_calls for r in rounds),
        "prompt_tokens": trace.prompt_tokens,
        "generated_tokens": trace.generated_tokens,
        "sequence_tokens": trace.length,
        "processed_tokens": answer.processed_tokens,
        "longest_reply_tokens": max((r.generated_tokens for r in rounds), default=0),
        "ending": answer.ending,
        "limit": trace.limit,
        "sql": answer.sql,
        "sql_error": answer.chosen.error,
        "wall_s": answer.elapsed_s,
        "model_s": model_s,
        "tokens_per_s": trace.generated_tokens / model_s if model_s > 0 else 0.0,
    }


def verdict(report: dict) -> list[str]:
    """Why the episode did not run to its end as the protocol says; empty when it did."""
    if report.get("error"):
        return [f"the episode raised {report['error']}"]
    problems = []
    most = report["max_rounds"] + 1  # the tool rounds, then the forced answer
    if not 1 <= report["rounds"] <= most:
        problems.append(f"{report['rounds']} rounds, not 1 to {most}")
    if report["ending"] not in ENDINGS:
        problems.append(f"unknown ending {report['ending']!r}")
    if report["generated_tokens"] < report["rounds"]:
        problems.append(f"{report['generated_tokens']} tokens generated in {report['rounds']} rounds")
    if report["longest_reply_tokens"] > report["turn_tokens"]:
        problems.append(
            f"a reply of {report['longest_reply_tokens']} tokens, over the {report['turn_tokens']} cap"
        )
    if report["sequence_tokens"] > report["token_budget"]:
        problems.append(f"{report['sequence_tokens']} tokens, over the {report['token_budget']}-token budget")
    if report["device"] != "cpu" and not report["decode_graphs"]:
        problems.append("decode graphs were off or fell back to eager decoding")
    return problems


def run(out_dir: str | Path | None = None, *, shapes: str = "2b", turn_tokens: int = TURN_TOKENS) -> dict:
    """Write the random checkpoint, load it, run one episode on the demo database; the report as a dict."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = SHAPES[shapes]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        reference = build_checkpoint(config, Path(tmp), device, dtype)
        del reference  # only its files are needed: free the device memory before the engine loads
        write_tokenizer_files(Path(tmp), config["vocab_size"])  # the real Qwen3.5 one at the real size
        engine = Engine.load(
            tmp, EngineOptions(device=device.type, dtype=str(dtype).removeprefix("torch."), max_batch_rows=1)
        )
        policy = TurnCappedPolicy(engine, load_prompts(tmp), turn_tokens)
    agent_config = AgentConfig(sampling=SamplingParams(seed=0))
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "shapes": shapes,
        "dtype": str(dtype).removeprefix("torch."),
        "question": QUESTION,
        "turn_tokens": turn_tokens,
        "token_budget": agent_config.token_budget,
        "max_rounds": agent_config.max_rounds,
    }
    with open_database(None) as db:
        report["setup_s"] = time.perf_counter() - started  # checkpoint, tokenizer, engine, demo database
        try:
            answer = Agent(db, policy, agent_config).ask(QUESTION)
        except Exception as error:
            log.exception("the episode failed")
            report["error"] = f"{type(error).__name__}: {error}"
        else:
            report.update(episode_report(answer))
    report["decode_graphs"] = engine.cuda_graph  # False also when a capture failed during the episode
    report["problems"] = verdict(report)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "gpu_ask.json").write_text(json.dumps(report, indent=2))
    return report


def render(report: dict) -> str:
    lines = [
        f"{report['device']}, {report['shapes']} shapes, {report['dtype']}, decode graphs {report['decode_graphs']}; "
        f"replies cut at {report['turn_tokens']} tokens, budget {report['token_budget']} tokens; "
        f"set-up (checkpoint, tokenizer, engine, demo database) {report['setup_s']:.1f} s",
    ]
    if "rounds" in report:
        lines.append(
            f"{report['rounds']} rounds ({', '.join(report['round_kinds'])}), {report['tool_calls']} tool calls, "
            f"{report['malformed_calls']} malformed; tokens: {report['prompt_tokens']} prompt, "
            f"{report['generated_tokens']} generated, {report['sequence_tokens']} in the sequence; ending "
            f"{report['ending']} (limit {report['limit']}); {report['wall_s']:.1f} s wall, "
            f"{report['tokens_per_s']:.1f} generated tokens/s of model time"
        )
    problems = report["problems"]
    lines.append("completed" if not problems else "FAILED: " + "; ".join(problems))
    return "\n".join(lines)


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.gpu_ask", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", env_var="SQLSCOUT_BENCH_OUT", help="folder for gpu_ask.json")
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="2b", env_var="SQLSCOUT_BENCH_SHAPES")
    parser.add_argument(
        "--turn-tokens",
        type=int,
        default=TURN_TOKENS,
        env_var="SQLSCOUT_BENCH_TURN_TOKENS",
        help="tokens after which each reply is cut (a random model never ends its turn)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.turn_tokens < 1:
        parser.error(f"argument --turn-tokens: must be at least 1, got {args.turn_tokens}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    report = run(args.out, shapes=args.shapes, turn_tokens=args.turn_tokens)
    print(render(report))
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

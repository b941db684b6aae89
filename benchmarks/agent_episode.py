"""Where an agent episode's time goes (model vs database) and the prefill that keeping state across turns saves.

Runs the agent on the demo database with a mid-size random Qwen3.5 checkpoint on the CPU. A random model
writes no tool calls, so the completions are replayed from scripts shaped like the trained model's episodes
(reasoning, then several calls per round, six rounds) and forced through the engine: every scripted token
runs through the model as one decode step, so model time is what generating that text costs, and the tool
calls run for real. The peer: an engine that re-sends the whole prompt every turn (no state kept) prefills
the full sequence each turn; its token count is summed from the trace and its prefill time measured against
ours turn by turn (see prefill_comparison). Usage: `python -m benchmarks.agent_episode`.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import configargparse

from benchmarks import tables
from benchmarks.eval.datasets import load_questions
from benchmarks.plots import grouped_bars, stacked_bars
from benchmarks.tables import RESULTS_DIR, CurrentTable, ratio
from dbtools.engines import open_database
from mcp_server.agent import Agent, AgentConfig
from mcp_server.agent.chat_format import END_OF_TURN, ChatFormat
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.prompts import Prompts
from model.engine import Engine
from model.engine_options import EngineOptions
from model.errors import ModelDirectoryError
from model.options import ENGINE_OPTIONS, add_options, pick
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent

# A few tens of millions of parameters besides the 248k-token embedding (which the LM head reuses): large
# enough that the model, not Python, dominates a step, small enough for a shared 2-core machine.
MID_SIZE_CONFIG = dict(
    hidden_size=384,
    intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=64,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    full_attention_interval=3,
)


def _call(tool: str, **args: Any) -> str:
    return json.dumps({"tool": tool, "args": args})


def _turn(thought: str, *calls: str) -> str:
    return thought + "\n</think>\n\n" + "\n".join(calls)


# Scripts by demo question id: six rounds of exploration ending in submit_sql, calls batched as the model does.
SCRIPTS: dict[str, list[str]] = {
    "demo-15": [
        _turn(
            "The question asks for a total over delivered orders of customers from France. I do not know the "
            "schema yet, so I start by listing the tables to find orders, customers and countries.",
            _call("list_tables"),
        ),
        _turn(
            "There are orders, customers and countries tables. I need the columns linking them: customers "
            "probably have a country code and orders a customer id. Let me describe all three.",
            _call("describe_table", table_name="orders"),
            _call("describe_table", table_name="customers"),
            _call("describe_table", table_name="countries"),
        ),
        _turn(
            "customers.country_code references countries.iso_code. I should check how France is spelled and "
            "which status values exist for orders.",
            _call("sample_rows", table_name="countries", limit=5),
            _call("distinct_values", table_name="orders", column_name="status", limit=20),
            _call("join_path", table_a="orders", table_b="countries"),
        ),
        _turn(
            "Status uses lower case 'delivered'. France is in countries with iso_code FR. Let me count "
            "matching orders first to make sure the join works.",
            _call(
                "run_query",
                sql="SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.id "
                "JOIN countries k ON c.country_code = k.iso_code WHERE k.name = 'France'",
            ),
            _call("run_query", sql="SELECT status, COUNT(*) FROM orders GROUP BY status"),
        ),
        _turn(
            "The join returns rows. Now the sum of total_amount for delivered orders of French customers.",
            _call(
                "run_query",
                sql="SELECT SUM(o.total_amount) FROM orders o JOIN customers c ON "
                "o.customer_id = c.id JOIN countries k ON c.country_code = k.iso_code WHERE "
                "k.name = 'France' AND o.status = 'delivered'",
            ),
        ),
        _turn(
            "The result is a single number, which answers the question. I submit this query.",
            _call(
                "submit_sql",
                sql="SELECT SUM(o.total_amount) FROM orders o JOIN customers c ON "
                "o.customer_id = c.id JOIN countries k ON c.country_code = k.iso_code WHERE "
                "k.name = 'France' AND o.status = 'delivered'",
            ),
        ),
    ],
    "demo-11": [
        _turn(
            "I need shipments handled by UPS that were delivered. First, the list of tables.",
            _call("list_tables"),
        ),
        _turn(
            "shipments and carriers look relevant. Describe both and look for the foreign key between them.",
            _call("describe_table", table_name="shipments"),
            _call("describe_table", table_name="carriers"),
            _call("foreign_keys", table_name="shipments"),
        ),
        _turn(
            "shipments.carrier_id references carriers.id. Check carrier names and shipment status values.",
            _call("distinct_values", table_name="carriers", column_name="carrier_name", limit=20),
            _call("distinct_values", table_name="shipments", column_name="status", limit=20),
            _call("sample_rows", table_name="shipments", limit=3),
        ),
        _turn(
            "Statuses are upper case, DELIVERED. There is 'UPS' and 'UPS 2'; the question says UPS.",
            _call("run_query", sql="SELECT id FROM carriers WHERE carrier_name = 'UPS'"),
            _call("run_query", sql="SELECT COUNT(*) FROM shipments WHERE status = 'DELIVERED'"),
        ),
        _turn(
            "Now the count restricted to UPS.",
            _call(
                "run_query",
                sql="SELECT COUNT(*) FROM shipments s JOIN carriers c ON s.carrier_id = c.id "
                "WHERE c.carrier_name = 'UPS' AND s.status = 'DELIVERED'",
            ),
        ),
        _turn(
            "That is the answer.",
            _call(
                "submit_sql",
                sql="SELECT COUNT(*) FROM shipments s JOIN carriers c ON s.carrier_id = c.id "
                "WHERE c.carrier_name = 'UPS' AND s.status = 'DELIVERED'",
            ),
        ),
    ],
    "demo-07": [
        _turn("Count employees of the Engineering department. Start with the tables.", _call("list_tables")),
        _turn(
            "Employees and Departments exist. Describe them.",
            _call("describe_table", table_name="Employees"),
            _call("describe_table", table_name="Departments"),
            _call("sample_rows", table_name="Departments", limit=20),
        ),
        _turn(
            "Employees.DepartmentID references Departments. Engineering is a department name. I count.",
            _call(
                "run_query",
                sql="SELECT COUNT(*) FROM Employees e JOIN Departments d ON e.DepartmentID = "
                "d.DepartmentID WHERE d.DepartmentName = 'Engineering'",
            ),
            _call("run_query", sql="SELECT COUNT(*) FROM Employees WHERE TerminationDate IS NULL"),
        ),
        _turn(
            "The question does not restrict to current employees, so the first count answers it.",
            _call(
                "submit_sql",
                sql="SELECT COUNT(*) FROM Employees e JOIN Departments d ON e.DepartmentID = "
                "d.DepartmentID WHERE d.DepartmentName = 'Engineering'",
            ),
        ),
    ],
}


class ForcedRun:
    """One episode on an engine session whose completions are scripted and run token by token."""

    def __init__(self, engine: Engine, prompt: str, script: list[str], max_tokens: int) -> None:
        self.engine = engine
        self.script = script
        self.turn = 0
        self.prefill_s = 0.0
        self.decode_s = 0.0
        self.session = engine.new_session(1, max_tokens)
        self.ids: list[int] = []  # every token of the sequence, in order
        self.turn_prompt_lengths: list[int] = []  # sequence length before each completion
        self._pending = prompt
        self.end_of_turn = engine.tokenizer.token_id(END_OF_TURN)

    def _flush(self) -> None:
        if self._pending:
            ids = self.engine.tokenizer.encode(self._pending)
            started = time.perf_counter()
            self.session.append(ids)
            self.prefill_s += time.perf_counter() - started
            self.ids += ids
            self._pending = ""

    def append(self, texts: dict[int, str]) -> None:
        self._pending += texts.get(0, "")

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        self._flush()
        self.turn_prompt_lengths.append(len(self.ids))
        reply = self.script[self.turn] if self.turn < len(self.script) else ""
        self.turn += 1
        ids = (self.engine.tokenizer.encode(reply) + [self.end_of_turn])[: max_new_tokens[0]]
        started = time.perf_counter()
        for token in ids:  # one forward per token, as generating it would take
            self.session.append([token])
        elapsed = time.perf_counter() - started
        self.decode_s += elapsed
        self.ids += ids
        stopped = ids[-1] == self.end_of_turn
        text = self.engine.tokenizer.decode(ids[:-1] if stopped else ids)
        return [Completion(text, text + (END_OF_TURN if stopped else ""), len(ids), stopped, elapsed)]

    def length(self, row: int) -> int:
        return len(self.ids) + self.count_tokens(self._pending)

    def count_tokens(self, text: str) -> int:
        return len(self.engine.tokenizer.encode(text)) if text else 0

    @property
    def processed_tokens(self) -> int:
        return self.session.processed_tokens

    def close(self) -> None:
        pass


class ForcedReplayPolicy:
    """Hands out ForcedRun episodes for one script."""

    name = "forced-replay"

    def __init__(self, engine: Engine, script: list[str]) -> None:
        self.engine = engine
        self.script = script
        self.prompts = Prompts()
        self.chat = ChatFormat(engine.tokenizer.render_chat)
        self.runs: list[ForcedRun] = []

    def start(self, prompt: str, samples: int, max_tokens: int) -> ForcedRun:
        run = ForcedRun(self.engine, prompt, self.script, max_tokens)
        self.runs.append(run)
        return run

    def close(self) -> None:
        pass


def prefill_comparison(
    engine: Engine, ids: list[int], prompt_lengths: list[int], generated: list[int]
) -> tuple[float, float]:
    """Prefill seconds of the episode's turns with state kept and with the whole prompt re-sent, timed turn by
    turn in alternation so that a change in the machine's load hits both alike.

    Kept state prefills only what was appended since the previous reply (the reply's own tokens were run while
    decoding, so they are appended untimed); re-sending prefills each turn's whole prompt on a fresh session.
    """
    kept_session = engine.new_session(1, len(ids) + 1)
    kept = resent = 0.0
    done = 0
    for length, reply in zip(prompt_lengths, generated, strict=True):
        started = time.perf_counter()
        kept_session.append(ids[done:length])
        kept += time.perf_counter() - started
        kept_session.append(ids[length : length + reply])
        done = length + reply
        fresh = engine.new_session(1, length + 1)
        started = time.perf_counter()
        fresh.append(ids[:length])
        resent += time.perf_counter() - started
    return kept, resent


def warm_up(engine: Engine) -> None:
    """One short prefill and a few decode steps, so one-off set-up costs stay out of the first episode."""
    session = engine.new_session(1, 128)
    session.append(engine.tokenizer.encode("warm up " * 16))
    for token in engine.tokenizer.encode(" done"):
        session.append([token])


def run_episode(engine: Engine, db, question, script: list[str]) -> dict[str, Any]:
    """Run one scripted episode and measure it and its re-send peer."""
    policy = ForcedReplayPolicy(engine, script)
    agent = Agent(db, policy, AgentConfig())
    started = time.perf_counter()
    answer = agent.ask(question.question, question.evidence).to_dict()
    wall = time.perf_counter() - started
    run = policy.runs[0]
    rounds = answer["trace"]["rounds"]
    db_s = sum(call["db_ms"] for r in rounds for call in r["calls"]) / 1000
    generated = [r["generated_tokens"] for r in rounds]
    kept_prefill_s, resend_prefill_s = prefill_comparison(engine, run.ids, run.turn_prompt_lengths, generated)
    return {
        "question_id": question.question_id,
        "ending": answer["ending"],
        "rounds": len(rounds),
        "tool_calls": sum(len(r["calls"]) for r in rounds),
        "sequence_tokens": len(run.ids),
        "generated_tokens": sum(generated),
        "wall_s": wall,
        "prefill_s": run.prefill_s,
        "decode_s": run.decode_s,
        "db_s": db_s,
        "other_s": wall - run.prefill_s - run.decode_s - db_s,
        "processed_tokens": run.processed_tokens,
        # Re-sending: each turn prefills its whole prompt, then decodes its reply.
        "resend_tokens": sum(p + g for p, g in zip(run.turn_prompt_lengths, generated, strict=True)),
        "kept_prefill_s": kept_prefill_s,
        "resend_prefill_s": resend_prefill_s,
    }


def checkpoint(model_dir: str | None) -> Path:
    """The given model directory, or the mid-size random checkpoint (written once into the temp folder)."""
    if model_dir:
        return Path(model_dir)
    from benchmarks.random_checkpoint import write_tiny_checkpoint

    path = Path(tempfile.gettempdir()) / "sqlscout-bench-qwen35-h384-l6"
    if not (path / "config.json").exists():
        write_tiny_checkpoint(path, text_config=MID_SIZE_CONFIG, seed=0)
    return path


def render(episodes: list[dict[str, Any]]) -> str:
    lines = [
        f"{'question':<10}{'rounds':>7}{'calls':>6}{'tokens':>8}{'wall s':>8}{'prefill s':>10}{'decode s':>9}"
        f"{'db s':>7}{'other s':>8}{'kept-state tok':>15}{'re-send tok':>12}{'tok ratio':>10}"
        f"{'prefill s: kept':>16}{'re-send':>9}{'ratio':>8}"
    ]
    for e in episodes:
        lines.append(
            f"{e['question_id']:<10}{e['rounds']:>7}{e['tool_calls']:>6}{e['sequence_tokens']:>8}"
            f"{e['wall_s']:>8.2f}{e['prefill_s']:>10.2f}{e['decode_s']:>9.2f}{e['db_s']:>7.3f}{e['other_s']:>8.2f}"
            f"{e['processed_tokens']:>15}{e['resend_tokens']:>12}{e['resend_tokens'] / e['processed_tokens']:>9.2f}x"
            f"{e['kept_prefill_s']:>16.2f}{e['resend_prefill_s']:>9.2f}{e['resend_prefill_s'] / e['kept_prefill_s']:>7.2f}x"
        )
    return "\n".join(lines)


def draw_plots(out: Path, episodes: list[dict[str, Any]]) -> None:
    """agent_episode.png (where the time goes) and agent_episode_tokens.png (tokens run, kept vs re-sent)."""
    stacked_bars(
        out / "agent_episode.png",
        title="Where an episode's time goes (mid-size random model, CPU)",
        groups=[e["question_id"] for e in episodes],
        parts={
            "prefill (model)": [e["prefill_s"] for e in episodes],
            "decode (model)": [e["decode_s"] for e in episodes],
            "database": [e["db_s"] for e in episodes],
            "agent (parsing, tokenising)": [max(0.0, e["other_s"]) for e in episodes],
        },
        ylabel="seconds",
    )
    grouped_bars(
        out / "agent_episode_tokens.png",
        title="Tokens run through the model per episode",
        groups=[e["question_id"] for e in episodes],
        series={
            "kept state (ours)": [e["processed_tokens"] for e in episodes],
            "re-send the whole prompt each turn": [e["resend_tokens"] for e in episodes],
        },
        ylabel="tokens",
    )


def current(episodes: list[dict], machine: str, date: str) -> CurrentTable:
    """Where each episode's time went, and what re-sending the whole prompt every turn would have cost."""
    rows = [
        [
            e["question_id"],
            str(e["rounds"]),
            str(e["tool_calls"]),
            f"{e['generated_tokens']:,}",
            f"{e['wall_s']:.2f}",
            f"{e['prefill_s']:.2f}",
            f"{e['decode_s']:.2f}",
            f"{e['db_s']:.2f}",
            ratio(e["resend_tokens"], e["processed_tokens"]),
            ratio(e["resend_prefill_s"], e["kept_prefill_s"]),
        ]
        for e in episodes
    ]
    return CurrentTable(
        key="agent_episode",
        title="Agent episode",
        section="Agent episode: where the time goes, and prefill saved by keeping state (`python -m benchmarks.agent_episode`)",
        command="python -m benchmarks.agent_episode",
        machine=machine,
        date=date,
        columns=[
            "question",
            "rounds",
            "calls",
            "generated",
            "wall s",
            "model prefill s",
            "model decode s",
            "database s",
            "tokens run: re-send / kept",
            "prefill s: re-send / kept",
        ],
        rows=rows,
        note="Replies replayed from scripts shaped like the trained model's, each token forced through the engine as "
        "one decode step; tool calls run for real on the demo database.",
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.agent_episode", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model",
        env_var="SQLSCOUT_BENCH_MODEL",
        help="model directory (default: a mid-size random checkpoint)",
    )
    add_options(parser, pick(ENGINE_OPTIONS, "device"), "the engine")
    parser.add_argument(
        "--questions",
        nargs="*",
        default=list(SCRIPTS),
        choices=list(SCRIPTS),
        env_var="SQLSCOUT_BENCH_QUESTIONS",
        help="scripted demo questions to run (a variable lists them as [id, ...])",
    )
    parser.add_argument(
        "--out",
        default=str(RESULTS_DIR),
        env_var="SQLSCOUT_BENCH_OUT",
        help="folder for agent_episode.json and agent_episode.png",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        engine = Engine.load(checkpoint(args.model), EngineOptions(device=args.device))
    except (ModelDirectoryError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    warm_up(engine)
    by_id = {q.question_id: q for q in load_questions("plain")}
    db = open_database(None)
    try:
        episodes = [run_episode(engine, db, by_id[qid], SCRIPTS[qid]) for qid in args.questions]
    finally:
        db.close()
    print(render(episodes))
    setting = {
        "model": str(args.model or "mid-size random Qwen3.5"),
        "device": engine.device.type,
        "text_config": None if args.model else MID_SIZE_CONFIG,
        "completions": "replayed from scripts, each token forced through the engine as one decode step",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "agent_episode.json").write_text(
        json.dumps({"setting": setting, "episodes": episodes}, indent=2) + "\n"
    )
    draw_plots(out, episodes)
    print(
        f"wrote agent_episode.json, agent_episode.png and agent_episode_tokens.png to {out}", file=sys.stderr
    )
    if not args.no_record:
        tables.record(current(episodes, tables.machine(), tables.now()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

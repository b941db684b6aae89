"""Execution accuracy and episode behaviour of the agent over a question set: `python -m benchmarks.eval`.

Formats: `plain` (JSON lines of question, evidence, gold_sql, database, difficulty; default: the hand-written
demo set), `sqale` (SQaLe question and schema records, parquet or JSON lines) and `bird` (BIRD's dev.json
with dev_databases/). Every flag also reads an environment variable, shown in --help.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import configargparse
from tqdm import tqdm

from benchmarks.eval.datasets import DEFAULT_PHRASING, FORMATS, EvalQuestion, load_questions
from benchmarks.eval.episode import SCORING_MAX_CHARS, SCORING_MAX_ROWS, execute_for_scoring, score_episode
from benchmarks.eval.policies import policy_source
from benchmarks.eval.report import build_report, render_report
from dbtools.engines import Database, open_database
from dbtools.errors import DatabaseToolError
from mcp_server.agent import Agent, AgentConfig
from mcp_server.agent.episode import EpisodeLimits
from mcp_server.agent.errors import EndpointError
from mcp_server.settings import OPTIONS as SERVER_OPTIONS
from model.options import ENGINE_OPTIONS, add_options, pick
from model.sampling_params import SamplingParams

log = logging.getLogger("benchmarks.eval")


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(
        prog="python -m benchmarks.eval", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="plain",
        env_var="SQLSCOUT_EVAL_FORMAT",
        help="question set format",
    )
    parser.add_argument(
        "--questions",
        env_var="SQLSCOUT_EVAL_QUESTIONS",
        help="question file: JSON lines (plain), SQaLe queries "
        "(.parquet or .jsonl) or BIRD dev.json (default for plain: benchmarks/eval/questions/demo.jsonl)",
    )
    parser.add_argument(
        "--schemas",
        env_var="SQLSCOUT_EVAL_SCHEMAS",
        help="SQaLe schemas dataset (.parquet or .jsonl); not needed when the question records carry "
        "full_schema and schema_content",
    )
    parser.add_argument(
        "--db-root",
        env_var="SQLSCOUT_EVAL_DB_ROOT",
        help="BIRD databases folder (default: dev_databases/ beside dev.json)",
    )
    parser.add_argument(
        "--cache-dir",
        env_var="SQLSCOUT_EVAL_CACHE_DIR",
        help="where SQaLe databases are built, once per schema (default: sqale/ in the cache directory, "
        "SQLSCOUT_CACHE_DIR)",
    )
    parser.add_argument(
        "--phrasing",
        default=DEFAULT_PHRASING,
        env_var="SQLSCOUT_EVAL_PHRASING",
        help="which of SQaLe's eight question phrasings to ask",
    )
    parser.add_argument(
        "--limit", type=int, env_var="SQLSCOUT_EVAL_LIMIT", help="evaluate only the first N questions"
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=1,
        env_var="SQLSCOUT_SAMPLES",
        help="episodes per question, voted on their results",
    )
    add_options(parser, pick(SERVER_OPTIONS, "model", "endpoint", "endpoint_model", "api_key"), "the model")
    add_options(parser, pick(ENGINE_OPTIONS, "device"), "the local engine")
    parser.add_argument(
        "--replay",
        env_var="SQLSCOUT_EVAL_REPLAY",
        help="JSON lines of scripted replies by question_id, replayed instead of generating (--model then only "
        "lends its tokenizer, chat template and prompts)",
    )
    parser.add_argument(
        "--token-budget",
        type=int,
        default=EpisodeLimits.token_budget,
        env_var="SQLSCOUT_EVAL_TOKEN_BUDGET",
        help=f"tokens per episode, prompt included (the protocol's {EpisodeLimits.token_budget}; "
        "smaller only to bound test runs)",
    )
    parser.add_argument(
        "--seed", type=int, env_var="SQLSCOUT_EVAL_SEED", help="sampling seed (default: unseeded)"
    )
    parser.add_argument(
        "--query-timeout",
        type=float,
        default=30.0,
        env_var="SQLSCOUT_EVAL_QUERY_TIMEOUT",
        help="statement timeout in seconds for the agent's queries and for scoring",
    )
    parser.add_argument(
        "--out",
        env_var="SQLSCOUT_EVAL_OUT",
        help="write the JSON report here and every episode to <out>.episodes.jsonl",
    )
    parser.add_argument(
        "--log-level", default="WARNING", env_var="SQLSCOUT_LOG_LEVEL", help="stderr log level"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> configargparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    return args


class EvalDatabases:
    """Each database opened once: a handle with the agent's usual caps and one without caps for scoring."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._handles: dict[str | None, tuple[Database, Database]] = {}

    def get(self, dsn: str | None) -> tuple[Database, Database]:
        if dsn not in self._handles:
            self._handles[dsn] = (
                open_database(dsn, timeout_s=self.timeout_s),
                open_database(
                    dsn, timeout_s=self.timeout_s, max_rows=SCORING_MAX_ROWS, max_chars=SCORING_MAX_CHARS
                ),
            )
        return self._handles[dsn]

    def close(self) -> None:
        for handles in self._handles.values():
            for db in handles:
                db.close()


def run_evaluation(
    questions: list[EvalQuestion],
    policy_for,
    *,
    samples: int,
    config: AgentConfig,
    timeout_s: float,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run one question after another and return the scored episode records."""
    databases = EvalDatabases(timeout_s)
    records = []
    try:
        bar = tqdm(questions, desc="episodes", unit="q", file=sys.stderr, disable=not progress)
        for question in bar:
            agent_db, scoring_db = databases.get(question.database)
            gold = execute_for_scoring(scoring_db, question.gold_sql, timeout_s)
            if gold.error:
                log.warning("question %s: the gold query failed: %s", question.question_id, gold.error)
            agent = Agent(agent_db, policy_for(question), config)
            started = time.perf_counter()
            try:
                answer = agent.ask(question.question, question.evidence, samples=samples).to_dict()
                agent_error = None
            except Exception as error:  # one broken episode is recorded, not allowed to end the run
                if isinstance(error, EndpointError) and all(r["agent_error"] for r in records):
                    raise  # the endpoint has never answered: a setup problem, not an episode's
                log.warning(
                    "question %s: the episode failed: %s",
                    question.question_id,
                    error,
                    exc_info=log.isEnabledFor(logging.DEBUG),
                )
                answer, agent_error = (
                    {"sql": None, "ending": "error", "trace": {}},
                    f"{type(error).__name__}: {error}",
                )
            record = score_episode(
                question,
                answer,
                db=scoring_db,
                gold=gold,
                latency_s=time.perf_counter() - started,
                timeout_s=timeout_s,
            )
            record["agent_error"] = agent_error
            record["processed_tokens"] = (answer.get("trace") or {}).get("processed_tokens")
            records.append(record)
            scored = [r["correct"] for r in records if r["correct"] is not None]
            if scored:
                bar.set_postfix(ex=f"{100 * sum(scored) / len(scored):.1f}%")
    finally:
        databases.close()
    return records


def write_outputs(out: str | Path, report: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    """The JSON report at `out` and one JSON line per episode beside it; returns the episodes file."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    episodes = out.with_name(out.stem + ".episodes.jsonl")
    with episodes.open("w") as lines:
        for record in records:
            lines.write(json.dumps(record, default=str) + "\n")
    return episodes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        questions = load_questions(
            args.format,
            args.questions,
            schemas=args.schemas,
            db_root=args.db_root,
            cache_dir=args.cache_dir,
            phrasing=args.phrasing,
            limit=args.limit,
        )
        policy_for = policy_source(
            questions,
            model_dir=args.model,
            endpoint=args.endpoint,
            endpoint_model=args.endpoint_model,
            api_key=args.api_key,
            device=args.device,
            replay=args.replay,
        )
    except (ValueError, FileNotFoundError, ImportError, RuntimeError, DatabaseToolError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not questions:
        print("error: the question set is empty", file=sys.stderr)
        return 2
    config = AgentConfig(sampling=SamplingParams(seed=args.seed), token_budget=args.token_budget)
    try:
        records = run_evaluation(
            questions, policy_for, samples=args.samples, config=config, timeout_s=args.query_timeout
        )
    except EndpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    settings = {
        "format": args.format,
        "questions": args.questions,
        "phrasing": args.phrasing if args.format == "sqale" else None,
        "limit": args.limit,
        "samples": args.samples,
        "policy": "replay" if args.replay else ("endpoint" if args.endpoint else "local"),
        "model": args.model,
        "endpoint": args.endpoint,
        "endpoint_model": args.endpoint_model,
        "seed": args.seed,
        "token_budget": args.token_budget,
        "query_timeout_s": args.query_timeout,
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    report = build_report(records, settings)
    print(render_report(report))
    if args.out:
        episodes = write_outputs(args.out, report, records)
        print(f"report: {args.out}\nepisodes: {episodes}", file=sys.stderr)
    return 0

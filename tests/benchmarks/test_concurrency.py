"""The concurrency benchmark: replayed completions cost the engine their length in the shared batch, and a run
reports each size's questions per minute and latencies with the ratios against one after another."""

from __future__ import annotations

import json

import pytest

from benchmarks.agent_episode import _call, _turn
from benchmarks.concurrency.__main__ import main
from benchmarks.concurrency.replayed_local import ReplayedLocalPolicy
from dbtools.engines import open_database
from mcp_server.agent import Agent
from mcp_server.agent.prompts import Prompts
from model.engine import Engine
from model.engine_options import EngineOptions
from tests.usage_errors import usage_error

SQL = "SELECT COUNT(*) FROM countries WHERE continent = 'Europe'"
SCRIPT = [
    _turn("Look first.", _call("run_query", sql=SQL)),
    _turn("That is it.", _call("submit_sql", sql=SQL)),
]


# Slow (left out of the fast tier): runs the concurrency benchmark's local engine.
@pytest.mark.slow
def test_a_replayed_reply_is_decoded_token_by_token_in_the_batch(tiny_model_dir):
    engine = Engine.load(tiny_model_dir, EngineOptions(device="cpu", max_batch_rows=4))
    policy = ReplayedLocalPolicy(engine, lambda prompt: SCRIPT, Prompts())
    with open_database(None) as db:
        answer = Agent(db, policy).ask("How many countries are in Europe?")
    trace = answer.chosen.trace
    assert answer.ending == "submit_sql" and [r.reply for r in trace.rounds] == [
        SCRIPT[0].split("</think>")[1].strip(),
        SCRIPT[1].split("</think>")[1].strip(),
    ]
    # Each reply decodes its own tokens and the end of its turn, all run through the model but the last.
    replies = [len(engine.tokenizer.encode(reply)) + 1 for reply in SCRIPT]
    assert [r.generated_tokens for r in trace.rounds] == replies
    assert answer.processed_tokens == trace.length - 1


# Slow (left out of the fast tier): runs the concurrency benchmark.
@pytest.mark.slow
def test_a_run_reports_each_size_with_ratios_against_one_after_another(tmp_path):
    argv = ["--sizes", "1", "2", "--completion-s", "0.05", "--skip-local", "--out", str(tmp_path)]
    assert main(argv) == 0
    report = json.loads((tmp_path / "concurrency.json").read_text())
    rows = report["endpoint"]["rows"]
    assert [row["questions"] for row in rows] == [1, 2]
    for row in rows:
        for mode in ("one_by_one", "together"):
            assert len(row[mode]["latencies_s"]) == row["questions"]
            assert row[mode]["questions_per_minute"] > 0 and row[mode]["cpu_ms_per_question"] > 0
        assert row["throughput_ratio"] > 0 and row["p95_ratio"] > 0
    assert "machine" in report and "date" in report


def test_a_size_below_one_is_a_usage_error(tmp_path, capsys):
    assert "every size must be at least 1" in usage_error(lambda: main(["--sizes", "0"]), capsys)

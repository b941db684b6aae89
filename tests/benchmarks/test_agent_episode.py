"""The episode benchmark's forced replay: real tool calls, and each token of the episode run through the model once."""

import pytest

from benchmarks.agent_episode import _call, _turn, main, run_episode
from benchmarks.eval.datasets import load_questions
from dbtools.engines import open_database
from model.engine import Engine
from model.engine_options import EngineOptions
from tests.usage_errors import usage_error


# Slow (left out of the fast tier): an episode on the full demo database.
@pytest.mark.slow
def test_forced_replay_runs_every_token_once_and_counts_the_resend_peer(tiny_model_dir):
    question = next(q for q in load_questions("plain") if q.question_id == "demo-01")
    script = [
        _turn("Look.", _call("run_query", sql="SELECT COUNT(*) FROM countries WHERE continent = 'Europe'")),
        _turn("Done.", _call("submit_sql", sql="SELECT COUNT(*) FROM countries WHERE continent = 'Europe'")),
    ]
    engine = Engine.load(tiny_model_dir, EngineOptions(device="cpu"))
    with open_database(None) as db:
        episode = run_episode(engine, db, question, script)

    assert episode["ending"] == "submit_sql" and episode["rounds"] == 2 and episode["tool_calls"] == 2
    assert episode["processed_tokens"] == episode["sequence_tokens"]
    # Re-sending: turn 2 prefills turn 1's prompt and reply again.
    assert episode["sequence_tokens"] < episode["resend_tokens"] < 2 * episode["sequence_tokens"]
    assert episode["db_s"] > 0 and episode["prefill_s"] > 0 and episode["decode_s"] > 0
    assert episode["kept_prefill_s"] > 0 and episode["resend_prefill_s"] > 0


def test_a_bad_device_or_model_directory_is_reported_in_one_line(tmp_path, capsys, monkeypatch):
    assert main(["--model", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 1
    assert "absent does not exist: give the directory that holds the model's" in capsys.readouterr().err
    monkeypatch.setenv("SQLSCOUT_DEVICE", "gpu")
    err = usage_error(lambda: main(["--out", str(tmp_path)]), capsys)
    assert "argument --device: invalid choice: 'gpu'" in err

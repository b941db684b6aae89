"""The episode benchmark's forced replay: real tool calls, and each token of the episode run through the model once."""

from benchmarks.agent_episode import _call, _turn, run_episode
from benchmarks.datasets import load_questions
from dbtools.engines import open_database
from model.engine import Engine


def test_forced_replay_runs_every_token_once_and_counts_the_resend_peer(tiny_model_dir):
    question = next(q for q in load_questions("plain") if q.question_id == "demo-01")
    script = [
        _turn("Look.", _call("run_query", sql="SELECT COUNT(*) FROM countries WHERE continent = 'Europe'")),
        _turn("Done.", _call("submit_sql", sql="SELECT COUNT(*) FROM countries WHERE continent = 'Europe'")),
    ]
    engine = Engine.load(tiny_model_dir, device="cpu")
    with open_database(None) as db:
        episode = run_episode(engine, db, question, script)

    assert episode["ending"] == "submit_sql" and episode["rounds"] == 2 and episode["tool_calls"] == 2
    assert episode["processed_tokens"] == episode["sequence_tokens"]
    # Re-sending: turn 2 prefills turn 1's prompt and reply again.
    assert episode["sequence_tokens"] < episode["resend_tokens"] < 2 * episode["sequence_tokens"]
    assert episode["db_s"] > 0 and episode["prefill_s"] > 0 and episode["decode_s"] > 0
    assert episode["kept_prefill_s"] > 0 and episode["resend_prefill_s"] > 0

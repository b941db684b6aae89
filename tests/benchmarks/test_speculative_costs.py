"""The speculative benchmark's cost table on an engine that captures its steps (emulated on the CPU): the plain
steps and the verify passes it times are both replays, of one graph per pass width; and its row of every replayed
episode together."""

from __future__ import annotations

from benchmarks import speculative
from benchmarks.emulated_capture import EmulatedCapture
from benchmarks.random_checkpoint import write_tiny_checkpoint
from model.engine import Engine
from model.engine_options import EngineOptions


def test_verify_passes_are_timed_as_replays_where_steps_are_captured(tmp_path, monkeypatch):
    monkeypatch.setattr(speculative, "CONTEXT", 64)
    monkeypatch.setattr(speculative, "REPEATS", 1)
    path = write_tiny_checkpoint(tmp_path / "tiny")
    plain = Engine.load(path, EngineOptions(device="cpu", speculate="off", max_context=256))
    capture = EmulatedCapture()
    engine = Engine(plain.model, plain.tokenizer, plain.options, capture=capture)
    report = speculative.verify_cost(engine)
    assert report["captured"] is True
    # One plain greedy step, and a pass for each width from 1 to the longest draft + 1.
    assert capture.captured["DecodeWorkspace"] == 1
    assert capture.captured["VerifySteps"] == max(speculative.DRAFT_TOKENS) + 1
    assert all(report[f"verify_{k}_ms"] > 0 for k in speculative.DRAFT_TOKENS)


def test_all_episodes_weigh_each_episode_by_its_decode_time():
    episodes = {
        "short": {"reply_tokens": 100, "plain_tokens_per_s": 10.0, "speculative_tokens_per_s": 20.0},
        "long": {"reply_tokens": 300, "plain_tokens_per_s": 10.0, "speculative_tokens_per_s": 15.0},
    }
    # 40 s of plain decoding against 5 + 20 s: 1.6x, not the 1.75x mean of the episodes' speed-ups.
    assert speculative.all_episodes(episodes) == {
        "reply_tokens": 400,
        "plain_tokens_per_s": 10.0,
        "speculative_tokens_per_s": 16.0,
        "speedup": 1.6,
    }


def test_a_replayed_episode_runs_its_replies_through_verify_passes_as_the_plain_session_runs_them(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "tiny")
    engine = Engine.load(path, EngineOptions(device="cpu", speculate="off", max_context=256))
    speculating = speculative._speculating(engine, 4)
    speculating.draft_budget = None  # every draft runs, whatever this machine's costs say
    ids = [3, 4, 5, 6, 7] * 12  # replies that repeat the context: drafts from it are accepted
    report = speculative.replay(engine, speculating, ids, [(10, 15), (30, 20)])
    assert report["reply_tokens"] == 35
    assert report["accepted"] > 0 and report["verify_passes"] > 0
    assert report["max_logit_difference"] < 1e-3

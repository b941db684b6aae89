"""The speculative benchmark's cost table on an engine that captures its steps (emulated on the CPU): the plain
steps and the verify passes it times are both replays, of one graph per pass width."""

from __future__ import annotations

from benchmarks import speculative
from benchmarks.random_checkpoint import write_tiny_checkpoint
from model.engine import Engine
from model.engine_options import EngineOptions
from tests.model.emulated_graph import EmulatedCapture


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
    assert capture.captures == 1 + max(speculative.DRAFT_TOKENS) + 1
    assert all(report[f"verify_{k}_ms"] > 0 for k in speculative.DRAFT_TOKENS)

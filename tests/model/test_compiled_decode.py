"""The CPU decode step under torch.compile: captured whole as one graph (no host reads, no per-layer guards), and
decoding the same tokens, logits and caches as the eager step."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from benchmarks.random_checkpoint import write_tiny_checkpoint
from model.decode_step import decode_step
from model.decode_workspace import DecodeWorkspace
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0)
NUCLEUS = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=3)
# Two layers (one of each kind) and a small vocabulary keep the compile of the whole step short.
SMALL = dict(vocab_size=300, num_hidden_layers=2, full_attention_interval=2)


@pytest.fixture(scope="module")
def small_engine(tmp_path_factory) -> Engine:
    directory = write_tiny_checkpoint(tmp_path_factory.mktemp("small"), text_config=SMALL, seed=5)
    return Engine.load(directory, EngineOptions(device="cpu", dtype="float32", max_context=128))


@pytest.mark.parametrize("sampling", [GREEDY, NUCLEUS], ids=["greedy", "nucleus"])
def test_the_decode_step_is_one_graph_without_breaks(engines, sampling):
    engine = engines["vl_untied_sharded"]
    session = engine.new_session(batch_size=2, max_tokens=32)
    session.append([[5, 6, 7], [8, 9, 10]])
    workspace = DecodeWorkspace(engine.model, session.cache)
    workspace.start.fill_(3)
    workspace.active.fill_(True)
    workspace.limit.fill_(8)
    step = workspace.step(sampling, 8)
    explained = torch._dynamo.explain(decode_step)(
        engine.model,
        session.cache.prefix(5),
        workspace.buffers,
        step.stop,
        workspace.spare,
        sampling,
        step.noise,
    )
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


# Slow (left out of the fast tier): torch.compile.
@pytest.mark.slow
def test_compiled_decoding_matches_eager_decoding(small_engine):
    compiled = Engine(small_engine.model, small_engine.tokenizer, replace(small_engine.options, compile=True))
    outputs = {}
    for name, engine in (("eager", small_engine), ("compiled", compiled)):
        session = engine.new_session(batch_size=2, max_tokens=64)
        session.append([[3, 4, 5, 6], [7, 8]])
        # Two calls of different lengths: the second one decodes over a longer KV prefix.
        tokens = session.generate([5, 3], GREEDY, stop_ids=set())
        tokens += session.generate([9, 12], GREEDY, stop_ids=set())
        session.append([[] for _ in range(2)])
        outputs[name] = (tokens, session)
    eager_tokens, eager = outputs["eager"]
    compiled_tokens, got = outputs["compiled"]
    assert compiled_tokens == eager_tokens and got.lengths == eager.lengths
    torch.testing.assert_close(got.last_logits, eager.last_logits, rtol=1e-4, atol=1e-4)
    for row, length in enumerate(eager.lengths):
        for mine, theirs in zip(got.cache.kv, eager.cache.kv, strict=True):
            for k_or_v in range(2):
                torch.testing.assert_close(mine[k_or_v][row, :, :length], theirs[k_or_v][row, :, :length])
    states = zip(got.cache.conv + got.cache.recurrent, eager.cache.conv + eager.cache.recurrent, strict=True)
    for mine, theirs in states:
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


# Slow (left out of the fast tier): torch.compile.
@pytest.mark.slow
def test_warming_up_compiles_the_step_a_later_session_of_one_row_runs(small_engine):
    compiled = Engine(small_engine.model, small_engine.tokenizer, replace(small_engine.options, compile=True))
    sampling = SamplingParams(temperature=0.7, top_k=10, top_p=0.8, seed=1)  # a mode no other test compiles
    graphs = torch._dynamo.utils.counters["stats"]
    before = graphs["unique_graphs"]
    compiled.warm_up(sampling)
    warmed = graphs["unique_graphs"]
    session = compiled.new_session(max_tokens=64)
    session.append([3, 4, 5, 6, 7])
    session.generate(6, sampling, stop_ids=set())
    assert warmed > before, "warm_up compiled nothing"
    assert graphs["unique_graphs"] == warmed, "the session compiled the step again"

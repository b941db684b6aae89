"""On a GPU: Triton kernels under the model agree with transformers, and the captured decode graphs and appends
with eager ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from model.cache import ModelCache
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams
from model.session import Session

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_engine(checkpoint_dirs) -> Engine:
    # The Triton gated delta rule takes power-of-two head dims >= 16, which this variant has.
    return Engine.load(
        checkpoint_dirs["text_tied"], EngineOptions(device="cuda", dtype="float32", max_context=256)
    )


def test_logits_match_transformers_on_cuda(cuda_engine, references):
    reference = references["text_tied"]
    ids = torch.randint(0, cuda_engine.config.vocab_size, (2, 97), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = reference(ids).logits.float()
    cache = ModelCache.allocate(cuda_engine.config, 2, 128, cuda_engine.device, cuda_engine.dtype)
    with torch.inference_mode():
        got = cuda_engine.model.forward(
            ids.cuda(), torch.zeros(2, dtype=torch.long, device="cuda"), cache
        ).cpu()
    # Triton matrix products may run in TF32, hence a looser bound than the CPU tests.
    assert ((got - want).abs().max() / want.abs().max()).item() < 2e-2


def _teacher_forced(engine: Engine, prompts: list[list[int]], turns) -> Session:
    """An eager session fed each turn's appended tokens, then its generated tokens one decode step at a time."""
    session = engine.new_session(batch_size=len(prompts))
    session.append(prompts)
    for appended, generated in turns:
        if any(appended):
            session.append(appended)
        for step in range(max(len(tokens) for tokens in generated)):
            session.append([tokens[step : step + 1] for tokens in generated])
    return session


def _assert_state_close(got: Session, want: Session, tolerance: float) -> None:
    """Each row's KV entries up to its length, the GDN states and the next logits agree within tolerance."""

    def check(mine: torch.Tensor, theirs: torch.Tensor, label: str) -> None:
        error = ((mine.float() - theirs.float()).abs().max() / theirs.float().abs().max()).item()
        assert error < tolerance, f"{label} differs by {error:.2e} of its largest magnitude"

    assert got.lengths == want.lengths
    for row, length in enumerate(want.lengths):
        for layer, (mine, theirs) in enumerate(zip(got.cache.kv, want.cache.kv, strict=True)):
            for name, a, b in (("keys", mine[0], theirs[0]), ("values", mine[1], theirs[1])):
                check(a[row, :, :length], b[row, :, :length], f"layer {layer} {name}, row {row}")
    for layer, (mine, theirs) in enumerate(zip(got.cache.conv, want.cache.conv, strict=True)):
        check(mine, theirs, f"GDN layer {layer} conv state")
    for layer, (mine, theirs) in enumerate(zip(got.cache.recurrent, want.cache.recurrent, strict=True)):
        check(mine, theirs, f"GDN layer {layer} recurrent state")
    check(got.last_logits, want.last_logits, "next logits")


def test_captured_decode_leaves_the_caches_and_logits_of_eager_decode(cuda_engine):
    """Graph replay against the eager decode kernels fed the same tokens: sampled tokens are only the input,
    the comparison is of caches and logits (tokens could part over a near-tie without anything being wrong)."""
    eager = Engine(cuda_engine.model, cuda_engine.tokenizer, replace(cuda_engine.options, cuda_graph=False))
    prompts = [
        torch.randint(
            0, cuda_engine.config.vocab_size, (n,), generator=torch.Generator().manual_seed(n)
        ).tolist()
        for n in (9, 30, 4)
    ]
    session = cuda_engine.new_session(batch_size=3)
    session.append(prompts)
    turns = []
    sampled = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=5)
    turns.append(([[], [], []], session.generate([20, 7, 13], sampled, stop_ids={17, 23})))
    session.append([[1, 2], [3], []])
    turns.append(([[1, 2], [3], []], session.generate(10, SamplingParams(temperature=0), stop_ids=set())))
    session.append([[], [], []])  # runs each row's last sampled token
    assert cuda_engine.cuda_graph, "the decode step should have been captured"
    assert cuda_engine.replays_appends, "the appends should have been captured"
    # fp32 on both sides; the kernels split the keys differently over caches of different capacity.
    _assert_state_close(session, _teacher_forced(eager, prompts, turns), tolerance=1e-3)
    # A fresh batch-3 session replays the same graphs: its first prompt token must have survived them.
    again = cuda_engine.new_session(batch_size=3)
    again.append(prompts)
    turn = again.generate(6, SamplingParams(temperature=0), stop_ids=set())
    again.append([[], [], []])
    _assert_state_close(again, _teacher_forced(eager, prompts, [([[], [], []], turn)]), tolerance=1e-3)

"""On a GPU: Triton kernels under the model agree with transformers, and the captured decode graph with eager decode."""

from __future__ import annotations

import pytest
import torch

from model.cache import ModelCache
from model.engine import Engine
from model.sampling_params import SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_engine(checkpoint_dirs) -> Engine:
    # The Triton gated delta rule takes power-of-two head dims >= 16, which this variant has.
    return Engine.load(checkpoint_dirs["text_tied"], device="cuda", dtype=torch.float32, max_context=256)


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


def test_captured_decode_equals_eager_decode(cuda_engine):
    eager = Engine(cuda_engine.model, cuda_engine.tokenizer, max_context=256, cuda_graph=False)
    prompts = [
        torch.randint(
            0, cuda_engine.config.vocab_size, (n,), generator=torch.Generator().manual_seed(n)
        ).tolist()
        for n in (9, 30, 4)
    ]
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=5)
    results = []
    for engine in (cuda_engine, eager):
        session = engine.new_session(batch_size=3)
        session.append(prompts)
        first = session.generate([20, 7, 13], params, stop_ids={17, 23})
        session.append([[1, 2], [3], []])
        second = session.generate(10, SamplingParams(temperature=0), stop_ids=set())
        results.append((first, second, session.lengths, session.processed_tokens))
    assert cuda_engine.cuda_graph, "the decode step should have been captured"
    assert results[0] == results[1]

"""The captured decode step (emulated on the CPU) against eager decode: the same tokens, caches and next logits
for new sessions, forks, several sampling settings and ragged batches; one capture per batch size and mode;
the capture writes only the spare slot, and the torch decode step reads nothing back to the host."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import kernels
from benchmarks.emulated_capture import HostReadError, no_host_reads
from model.cache import ModelCache
from model.engine import Engine
from model.sampling import sample
from model.sampling_params import SamplingParams
from tests.model.forked_rows import forked

GREEDY = SamplingParams(temperature=0)
NUCLEUS = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=3)
# Over the whole vocabulary: a low temperature keeps a few candidates in the race, so the ~1e-6 that eager
# attention over only the used positions differs by cannot swap a sampled token.
WHOLE_VOCABULARY = SamplingParams(temperature=0.4, top_k=0, top_p=1.0, seed=4)
TOP_P_ONLY = SamplingParams(temperature=0.5, top_k=0, top_p=0.8, seed=5)


def random_tokens(engine: Engine, length: int, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, engine.config.vocab_size, (length,), generator=generator).tolist()


# fp32: eager decode attends over only the used positions, a replay over the whole cache, so the two differ
# in the last bits, and the recurrent states carry those bits through every step (1.6e-5 after 39 steps on an
# AVX2 CPU, whose sums run in another order than AVX-512's). A capture that writes a real position differs by
# about 1. Differences are measured against the largest magnitude of the tensor.
TOLERANCE = 1e-4


def _assert_close(got: torch.Tensor, want: torch.Tensor, label: str) -> None:
    difference = (got - want).abs()
    error = (difference.max() / want.abs().max()).item()
    worst = tuple(torch.unravel_index(difference.argmax(), difference.shape))
    assert error <= TOLERANCE, (
        f"{label}: differs by {error:.2e} of its largest magnitude (allowed {TOLERANCE:.0e}); worst at index "
        f"{tuple(int(i) for i in worst)}: {got[worst].item():.6g} instead of {want[worst].item():.6g}"
    )


def assert_same_state(got, want) -> None:
    """Every row's KV entries (up to its length), GDN conv and recurrent states and next logits agree."""
    got.append([[] for _ in got.lengths] if len(got.lengths) > 1 else [])
    want.append([[] for _ in want.lengths] if len(want.lengths) > 1 else [])
    assert got.lengths == want.lengths
    for row, length in enumerate(want.lengths):
        for layer, ((k, v), (wk, wv)) in enumerate(zip(got.cache.kv, want.cache.kv, strict=True)):
            label = f"attention layer {layer}, row {row}"
            _assert_close(k[row, :, :length], wk[row, :, :length], f"{label} keys [head, position, dim]")
            _assert_close(v[row, :, :length], wv[row, :, :length], f"{label} values [head, position, dim]")
    for kind in ("conv", "recurrent"):
        for layer, (mine, theirs) in enumerate(
            zip(getattr(got.cache, kind), getattr(want.cache, kind), strict=True)
        ):
            _assert_close(mine, theirs, f"GDN layer {layer} {kind} state")
    _assert_close(got.last_logits, want.last_logits, "next logits")


def test_new_session_over_several_sampling_settings(pair):
    captured, eager, _ = pair
    prompt = random_tokens(eager, 37)
    sessions = [engine.new_session() for engine in (captured, eager)]
    for session in sessions:
        session.append(prompt)
    for sampling, count in ((GREEDY, 12), (NUCLEUS, 9), (WHOLE_VOCABULARY, 7), (TOP_P_ONLY, 6), (GREEDY, 5)):
        got, want = (session.generate(count, sampling, stop_ids=set()) for session in sessions)
        assert got == want
        assert_same_state(*sessions)


def test_forked_rows(pair):
    captured, eager, _ = pair
    prompt = random_tokens(eager, 29, seed=1)
    results = []
    for engine in (captured, eager):
        parent = engine.new_session()
        parent.append(prompt)
        children = forked(parent, 3)
        tokens = children.generate(10, WHOLE_VOCABULARY, stop_ids=set())
        tokens += parent.generate(6, GREEDY, stop_ids=set())
        results.append((parent, children, tokens))
    assert results[0][2] == results[1][2]
    assert_same_state(results[0][1], results[1][1])
    assert_same_state(results[0][0], results[1][0])


def test_ragged_batch_and_rows_sitting_out(pair):
    captured, eager, _ = pair
    prompts = [random_tokens(eager, n, seed=n) for n in (17, 41, 5)]
    stop = {random_tokens(eager, 1, seed=99)[0]}
    sessions = [engine.new_session(batch_size=3) for engine in (captured, eager)]
    for session in sessions:
        session.append(prompts)
    got, want = (session.generate([9, 14, 6], NUCLEUS, stop_ids=stop) for session in sessions)
    assert got == want
    assert_same_state(*sessions)
    for session in sessions:
        session.append([[3, 4], [], [8]])
    got, want = (session.generate([5, 7], GREEDY, stop_ids=set(), rows=[0, 2]) for session in sessions)
    assert got == want
    assert_same_state(*sessions)


@pytest.mark.parametrize("sampling", [GREEDY, NUCLEUS], ids=["greedy", "nucleus"])
def test_calls_after_the_first_run_their_pending_token_in_the_captured_step(pair, monkeypatch, sampling):
    """A generation in calls of a few tokens, as the serving scheduler makes: no eager one-token pass between
    the calls, and the tokens and state of the eager engine's same calls, rows asked for in turn."""
    captured, eager, _ = pair
    prompts = [random_tokens(eager, 13, seed=7), random_tokens(eager, 20, seed=8)]
    sessions = []
    for engine in (captured, eager):
        session = engine.new_session(2)
        session.append(prompts)
        sessions.append(session)
    eager_steps = []
    step_rows = type(sessions[0]).step_rows
    monkeypatch.setattr(
        type(sessions[0]),
        "step_rows",
        lambda self, *args: (eager_steps.append(self), step_rows(self, *args))[1],
    )
    for limits, rows in (([3, 3], [0, 1]), ([4], [1]), ([2, 5], [0, 1]), ([3], [0])):
        got, want = (session.generate(limits, sampling, stop_ids=set(), rows=rows) for session in sessions)
        assert got == want
    assert sessions[0] not in eager_steps
    assert_same_state(*sessions)


def test_a_full_row_asked_for_more_keeps_its_pending_token(pair):
    captured, eager, _ = pair
    sessions = [engine.new_session(2, max_tokens=12) for engine in (captured, eager)]
    for session in sessions:
        session.append([random_tokens(eager, 5, seed=1), random_tokens(eager, 5, seed=2)])
        session.generate([7, 3], GREEDY, stop_ids=set())
    assert sessions[0].lengths == [12, 8]
    # Row 0 is full: it gets no token, while row 1 runs its pending token in the captured step.
    got, want = (session.generate([2, 2], GREEDY, stop_ids=set()) for session in sessions)
    assert got == want and got[0] == [] and len(got[1]) == 2
    assert sessions[0].lengths == sessions[1].lengths == [12, 10]


def test_one_capture_per_batch_size_and_sampling_mode(pair):
    captured, eager, capture = pair
    for question in range(3):
        root = captured.new_session()
        root.append(random_tokens(eager, 11 + question, seed=question))
        root.generate(4, GREEDY, stop_ids=set())
        rows = forked(root, 2)
        rows.generate(4, NUCLEUS, stop_ids=set())
        rows.generate(3, SamplingParams(temperature=0.5, top_k=20, top_p=0.7, seed=question), stop_ids=set())
        root.generate(3, GREEDY, stop_ids={1, 2})
    # batch 1 greedy; batch 2 with top-k 20 and top-p on: temperatures and top_p values share one step.
    assert capture.captured["DecodeWorkspace"] == 2
    assert captured.cuda_graph, "the torch backend's decode step should be capturable"


def test_capture_writes_only_the_spare_slot(pair):
    captured, _, capture = pair
    workspace = captured.workspace(2)
    generator = torch.Generator().manual_seed(0)
    for tensor in workspace.cache.tensors():
        tensor.copy_(torch.randn(tensor.shape, generator=generator))
    # A decoder's buffers as a finished generation leaves them: start at real positions, rows active.
    workspace.start.copy_(torch.tensor([0, 5]))
    workspace.active.fill_(True)
    workspace.limit.fill_(100)
    cache = workspace.cache
    kv_before = [tensor.clone() for kv in cache.kv for tensor in kv]
    states_before = [tensor.clone() for tensor in cache.conv + cache.recurrent]
    with torch.inference_mode():
        workspace.step(NUCLEUS, 8)
    assert capture.captured["DecodeWorkspace"] == 1
    spare = workspace.spare
    for after, was in zip([tensor for kv in cache.kv for tensor in kv], kv_before, strict=True):
        assert torch.equal(after[:, :, :spare], was[:, :, :spare]), "a real KV position was written"
        assert not torch.equal(after[:, :, spare], was[:, :, spare]), "the capture should write the spare"
    for after, was in zip(cache.conv + cache.recurrent, states_before, strict=True):
        assert torch.equal(after, was), "a GDN state was changed"


@pytest.mark.parametrize("batch", [1, 3])
def test_torch_decode_step_reads_nothing_back_to_the_host(engines, batch):
    engine = engines["vl_untied_sharded"]
    config = engine.config
    cache = ModelCache.allocate(config, batch, 40, engine.device, engine.dtype)
    tokens = torch.tensor(random_tokens(engine, batch))[:, None]
    start = torch.arange(batch) * 7 + 3
    active = torch.arange(batch) != 1
    noise = torch.ones(batch, 20)
    previous = kernels.get_backend()
    kernels.set_backend("torch")
    try:
        with torch.inference_mode(), no_host_reads():
            logits = engine.model.decode(tokens, start, cache, active=active)
            sample(logits, NUCLEUS, noise, temperature=torch.ones(1), top_p=torch.ones(1))
    finally:
        kernels.set_backend(previous)
    with pytest.raises(HostReadError), no_host_reads():
        bool(start.any())


class FailingCapture:
    """A capture that fails after its warm-up, as CUDA does on an op it cannot record."""

    def capture(self, step):
        step()
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_failed_capture_falls_back_to_eager_decoding(engines, caplog):
    base = engines["text_mqa"]
    failing = Engine(base.model, base.tokenizer, base.options, capture=FailingCapture())
    eager = Engine(base.model, base.tokenizer, replace(base.options, cuda_graph=False))
    for question in range(2):
        prompt = random_tokens(eager, 19, seed=question)
        sessions = [engine.new_session() for engine in (failing, eager)]
        for session in sessions:
            session.append(prompt)
        got, want = (session.generate(8, NUCLEUS, stop_ids=set()) for session in sessions)
        assert got == want
        assert_same_state(*sessions)
    assert not failing.cuda_graph
    assert caplog.text.count("decoding eagerly from now on") == 1

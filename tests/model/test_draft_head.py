"""The MTP draft head: a checkpoint without one is explained, a random head's drafts change no token (greedy or
seeded) and leave plain decoding's states, and its own KV cache holds what filling it in one pass gives."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import save_file

from model.draft_budget import DraftBudget
from model.draft_head import draft_head_layout
from model.engine import Engine
from model.engine_options import EngineOptions
from model.errors import ModelDirectoryError
from model.sampling_params import SamplingParams
from tests.model.test_speculative import LIMITS, PROMPTS, _assert_same_state, _generate

GREEDY = SamplingParams(temperature=0)


def write_draft_head(checkpoint, directory, seed: int = 0):
    """A directory with checkpoint's config.json and random mtp.* tensors only (as the base model's head)."""
    directory.mkdir()
    shutil.copy(checkpoint / "config.json", directory / "config.json")
    from model.config import Qwen35Config

    config = Qwen35Config.from_model_dir(checkpoint)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for part in draft_head_layout(config).values():
        for name, shape in part.sources:
            scale = 0.1 if name.endswith("norm.weight") else 0.2
            tensors[name] = (torch.randn(shape, generator=generator) * scale).to(torch.bfloat16)
    save_file(tensors, directory / "model.safetensors")
    return directory


@pytest.fixture(scope="module")
def head_dir(checkpoint_dirs, tmp_path_factory):
    return write_draft_head(checkpoint_dirs["text_tied"], tmp_path_factory.mktemp("heads") / "head")


def _engine(path, **options) -> Engine:
    return Engine.load(path, EngineOptions(device="cpu", dtype="float32", max_context=512, **options))


def test_a_checkpoint_without_a_head_is_explained(checkpoint_dirs):
    with pytest.raises(ModelDirectoryError, match=r"no multi-token-prediction head.*--draft-head DIR"):
        _engine(checkpoint_dirs["text_tied"], speculate="mtp")


def test_a_head_of_other_shapes_is_refused(checkpoint_dirs, tmp_path):
    other = write_draft_head(checkpoint_dirs["text_mqa"], tmp_path / "other")
    with pytest.raises(ModelDirectoryError, match="config.json and the weights disagree"):
        _engine(checkpoint_dirs["text_tied"], speculate="mtp", draft_head=other)


# Slow (left out of the fast tier): generations with a draft head, plain and speculative.
@pytest.mark.slow
@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(temperature=0.8, top_k=30, seed=3)])
def test_random_head_drafts_change_no_token_and_no_state(checkpoint_dirs, head_dir, sampling):
    path = checkpoint_dirs["text_tied"]
    plain_session, expected = _generate(_engine(path, speculate="off"), sampling)
    engine = _engine(path, speculate="mtp", draft_head=head_dir, speculate_tokens=3)
    engine.draft_budget = None  # a random head's drafts are checked whole all the same
    session, tokens = _generate(engine, sampling)
    assert tokens == expected
    _assert_same_state(session, plain_session)
    stats = session.speculation
    assert stats.verify_passes > 0 and stats.drafted > stats.verify_passes  # multi-token drafts
    assert stats.steps <= len(LIMITS)  # the head always drafts: plain steps only for rows' last tokens
    assert stats.verify_passes < sum(LIMITS)


# Slow (left out of the fast tier): a speculative generation and a second prefill.
@pytest.mark.slow
def test_the_heads_cache_equals_one_pass_over_the_sequence(checkpoint_dirs, head_dir):
    """Filled across prefill, verify passes and drafts, the head's KV at every filled position is what one pass
    over (token t + 1, trunk hidden state t) of the whole sequence writes."""
    path = checkpoint_dirs["text_tied"]
    engine = _engine(path, speculate="mtp", draft_head=head_dir)
    engine.draft_budget = None
    session, outputs = _generate(engine, GREEDY)
    for row, prompt in enumerate(PROMPTS):
        sequence = list(prompt) + outputs[row]
        filled = session.drafts.head.filled[row]
        assert filled >= len(sequence) - 4  # drafts kept it near the end
        fresh = engine.new_session(1, 400)
        fresh.append(sequence[:-1])  # every position whose next token is known
        hidden = fresh.drafts.head.unfilled[0][:filled]
        head_kv = [torch.zeros_like(t[:1]) for t in session.cache.kv[-1]]
        engine.draft_head.forward(
            torch.tensor([sequence[1 : filled + 1]]),
            hidden[None],
            torch.tensor([0]),
            head_kv,
            torch.tensor([filled - 1]),
        )
        # Decode steps (the fused CPU kernels) and one prefill pass (the torch reference) sum in other orders.
        for mine, expected in zip(session.cache.kv[-1], head_kv, strict=True):
            torch.testing.assert_close(mine[row, :, :filled], expected[0, :, :filled], rtol=1e-3, atol=5e-5)


def test_the_draft_head_option_needs_mtp():
    from model.errors import OptionError

    with pytest.raises(OptionError, match="draft_head is the head of --speculate mtp"):
        EngineOptions(draft_head="x")


# Slow (left out of the fast tier): generations with a draft head, plain and speculative.
@pytest.mark.slow
def test_a_head_whose_drafts_do_not_pay_is_left_idle_and_caught_up_later(
    checkpoint_dirs, head_dir, monkeypatch
):
    """With the draft budget on, a random head's drafts are declined (its forward skipped), tried again now and
    then, and its cache caught up over the backlog each time: the tokens stay plain decoding's. Passes are timed
    as on a CPU where each drafted token costs half a step, so that the budget's choices do not hang on this
    machine's load."""
    record_pass = DraftBudget.record_pass
    monkeypatch.setattr(
        DraftBudget,
        "record_pass",
        lambda self, batch, width, seconds: record_pass(self, batch, width, 1.0 + 0.5 * (width - 1)),
    )
    path = checkpoint_dirs["text_tied"]
    _, expected = _generate(_engine(path, speculate="off"), GREEDY)
    engine = _engine(path, speculate="mtp", draft_head=head_dir)
    session, tokens = _generate(engine, GREEDY)
    assert tokens == expected
    stats = session.speculation
    assert stats.steps > 3 * stats.verify_passes > 0

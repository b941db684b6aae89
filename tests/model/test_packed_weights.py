"""bf16 weights packed in oneDNN's layout on CPUs that multiply bf16 natively: the products equal F.linear's, a
loaded bf16 engine packs its projections (and an untied head) and gives the logits the plain weights give, and
int8, compiled or fp32 engines keep their weights as they are, as does a CPU whose oneDNN cannot pack."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model import engine as engine_module
from model import packed_weights
from model.engine import Engine
from model.int8_weights import Int8Weight
from model.packed_weights import PackedWeight, pack_weight, packed_linear, packing_applies

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(
    not packing_applies(CPU, torch.bfloat16),
    reason="needs a CPU that multiplies bf16 natively (oneDNN packing)",
)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 1, 48),  # one decode token
        (3, 1, 48),  # a batched decode step
        (2, 37, 48),  # a prefill
    ],
)
def test_a_packed_product_equals_f_linear(shape):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(40, 48, generator=generator).to(torch.bfloat16)
    x = torch.randn(*shape, generator=generator).to(torch.bfloat16)
    out = packed_linear(x, pack_weight(weight))
    assert out.dtype == torch.bfloat16 and out.shape == (*shape[:-1], 40)
    torch.testing.assert_close(out, F.linear(x, weight), rtol=0, atol=0)


def test_a_strided_or_fp32_input_is_multiplied_as_its_bf16_values():
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(24, 32, generator=generator).to(torch.bfloat16)
    strided = torch.randn(4, 6, 32, generator=generator).to(torch.bfloat16)[:, ::2]
    torch.testing.assert_close(packed_linear(strided, pack_weight(weight)), F.linear(strided, weight))
    wide = torch.randn(2, 32, generator=generator)
    out = packed_linear(wide, pack_weight(weight))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, F.linear(wide.to(torch.bfloat16), weight).float())


@pytest.mark.parametrize("variant", ["text_tied", "vl_untied_sharded"])
def test_a_bf16_engine_packs_its_projections_and_gives_the_plain_weights_logits(
    checkpoint_dirs, variant, monkeypatch
):
    packed = Engine.load(checkpoint_dirs[variant], device="cpu", dtype=torch.bfloat16, max_context=64)
    monkeypatch.setattr(engine_module, "packing_applies", lambda device, dtype: False)
    plain = Engine.load(checkpoint_dirs[variant], device="cpu", dtype=torch.bfloat16, max_context=64)
    weights = packed.model.weights
    projections = [name for name in weights if name.endswith("proj.weight")]
    assert projections and all(isinstance(weights[name], PackedWeight) for name in projections)
    tied = packed.config.tie_word_embeddings
    assert (weights["lm_head.weight"] is weights["embed_tokens.weight"]) == tied
    assert isinstance(weights["lm_head.weight"], PackedWeight) != tied
    assert not any(isinstance(w, PackedWeight) for w in plain.model.weights.values())
    prompt = torch.randint(0, packed.config.vocab_size, (20,), generator=torch.Generator().manual_seed(2))
    sessions = [engine.new_session(max_tokens=40) for engine in (packed, plain)]
    for session in sessions:
        session.append(prompt.tolist())
    torch.testing.assert_close(sessions[0].last_logits, sessions[1].last_logits, rtol=0, atol=0)


@pytest.mark.parametrize(
    "settings",
    [{"dtype": torch.float32}, {"dtype": torch.bfloat16, "quantize": "int8"}],
    ids=["fp32", "int8"],
)
def test_other_engines_keep_their_weights(checkpoint_dirs, settings):
    engine = Engine.load(checkpoint_dirs["text_mqa"], device="cpu", max_context=64, **settings)
    weights = engine.model.weights.values()
    assert not any(isinstance(w, PackedWeight) for w in weights)
    if "quantize" in settings:
        assert any(isinstance(w, Int8Weight) for w in weights)


def test_a_compiled_step_keeps_plain_weights(checkpoint_dirs):
    engine = Engine.load(
        checkpoint_dirs["text_mqa"], device="cpu", dtype=torch.bfloat16, max_context=64, compile_decode=True
    )
    assert not any(isinstance(w, PackedWeight) for w in engine.model.weights.values())


def test_a_cpu_whose_onednn_cannot_pack_keeps_plain_weights(checkpoint_dirs, monkeypatch):
    def cannot_pack(weight, rows):
        raise RuntimeError("could not create a primitive")

    monkeypatch.setattr(packed_weights, "_reorder", cannot_pack)
    engine = Engine.load(checkpoint_dirs["text_mqa"], device="cpu", dtype=torch.bfloat16, max_context=64)
    assert not any(isinstance(w, PackedWeight) for w in engine.model.weights.values())
    session = engine.new_session()
    session.append([1, 2, 3])
    assert torch.isfinite(session.last_logits).all()

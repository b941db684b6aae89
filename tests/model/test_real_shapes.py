"""Qwen3.5-2B's layer shapes in bf16 with the torch kernels: a prompt prefilled in pieces and then decoded token
by token leaves the caches and logits of one whole prefill, with the GDN state carried over many chunks.

One Gated DeltaNet and one full-attention layer of the real dimensions (hidden 2048, MLP 6144, 8 query / 2 KV
heads x 256, 16 + 16 GDN heads x 128, conv 4) with random weights; the vocabulary is small, as it is no layer.
4,096 tokens (64 GDN chunks; two passes of about 0.9 TFLOP each) take about 90 s on two CPU cores, where bf16
matrix products run at about 15-25 GFLOP/s.
"""

from __future__ import annotations

import pytest
import torch

import kernels
from model.cache import ModelCache
from model.config import Qwen35Config
from model.qwen35 import Qwen35Model, weight_layout

# Slow (left out of the fast tier): Qwen3.5-2B's layer shapes in bf16.
pytestmark = pytest.mark.slow


TOKENS = 4096
DECODED = 8
# Prefill pieces: several forward calls, the last one not a whole number of 64-token GDN chunks.
PIECE = 768
# bf16 tensors may differ by a couple of units in the last place of their largest values (2^-8 relative);
# the GDN recurrent state is fp32.
BF16_TOLERANCE = 1e-2
STATE_TOLERANCE = 1e-3

CONFIG = Qwen35Config(
    vocab_size=512,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    layer_types=("linear_attention", "full_attention"),
    rms_norm_eps=1e-6,
    rope_theta=1e7,
    partial_rotary_factor=0.25,
    tie_word_embeddings=True,
    max_position_embeddings=262144,
)


def _random_model(seed: int = 0) -> Qwen35Model:
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, layout in weight_layout(CONFIG).items():
        shape = layout.shape
        if name.endswith("A_log"):
            weight = torch.empty(shape).uniform_(1, 16, generator=generator).log()
        elif name.endswith("dt_bias"):
            weight = torch.rand(shape, generator=generator)
        elif name.endswith("linear_attn.norm.weight"):
            weight = torch.ones(shape)
        elif name.endswith("conv1d.weight"):
            weight = torch.randn(shape, generator=generator) * 0.5
        elif len(shape) == 1:  # zero-centred norm weights
            weight = torch.randn(shape, generator=generator) * 0.1
        elif name == "embed_tokens.weight":
            weight = torch.randn(shape, generator=generator)
        else:
            weight = torch.randn(shape, generator=generator) * shape[1] ** -0.5
        weights[name] = weight.to(layout.dtype or torch.bfloat16)
    weights["lm_head.weight"] = weights["embed_tokens.weight"]
    return Qwen35Model(CONFIG, weights)


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


@pytest.fixture
def torch_kernels():
    previous = kernels.get_backend()
    kernels.set_backend("torch")
    yield
    kernels.set_backend(previous)


def test_pieces_then_decode_equal_one_prefill_at_real_shapes_in_bf16(torch_kernels):
    model = _random_model()
    ids = torch.randint(0, CONFIG.vocab_size, (1, TOKENS), generator=torch.Generator().manual_seed(1))
    zero = torch.zeros(1, dtype=torch.long)
    with torch.inference_mode():
        whole = ModelCache.allocate(CONFIG, 1, TOKENS + 1, model.device, torch.bfloat16)
        want = model.forward(ids, zero, whole)[0, TOKENS - DECODED - 1 : TOKENS]

        split = ModelCache.allocate(CONFIG, 1, TOKENS + 1, model.device, torch.bfloat16)
        prefilled = TOKENS - DECODED
        for begin in range(0, prefilled, PIECE):
            end = min(begin + PIECE, prefilled)
            last = model.prefill(ids[:, begin:end], zero + begin, split, zero + end - begin - 1)
        got = [last]
        for position in range(prefilled, TOKENS):
            # As a captured decode step runs it: one token, the row marked active.
            got.append(
                model.decode(
                    ids[:, position : position + 1],
                    zero + position,
                    split,
                    active=torch.ones(1, dtype=torch.bool),
                )
            )
        got = torch.cat(got)
    assert torch.isfinite(want).all()
    assert _relative_error(got, want) < BF16_TOLERANCE
    for (keys, values), (want_keys, want_values) in zip(split.kv, whole.kv, strict=True):
        assert _relative_error(keys[:, :, :TOKENS], want_keys[:, :, :TOKENS]) < BF16_TOLERANCE
        assert _relative_error(values[:, :, :TOKENS], want_values[:, :, :TOKENS]) < BF16_TOLERANCE
    for mine, theirs in zip(split.conv, whole.conv, strict=True):
        assert _relative_error(mine, theirs) < BF16_TOLERANCE
    for mine, theirs in zip(split.recurrent, whole.recurrent, strict=True):
        assert _relative_error(mine, theirs) < STATE_TOLERANCE

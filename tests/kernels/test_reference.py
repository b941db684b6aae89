"""The torch references against transformers' Qwen3.5 modules, in fp32 on random inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

from kernels.reference.attention import attention
from kernels.reference.causal_conv1d import causal_conv1d
from kernels.reference.gated_delta_rule import chunked, gated_delta_rule, prepare, recurrent
from kernels.reference.gated_rms_norm import gated_rms_norm
from kernels.reference.rms_norm import rms_norm
from kernels.reference.rotary import rotary_embedding

TOL = {"rtol": 1e-5, "atol": 1e-5}


def test_rms_norm_matches_zero_centred_module():
    x = torch.randn(3, 5, 96)
    module = qwen.Qwen3_5RMSNorm(96, eps=1e-6)
    torch.nn.init.normal_(module.weight, std=0.1)
    torch.testing.assert_close(rms_norm(x, module.weight.detach(), 1e-6), module(x).detach(), **TOL)


def test_rms_norm_plain_weight_and_residual():
    x, r, w = torch.randn(4, 70), torch.randn(4, 70), torch.randn(70)
    y, h = rms_norm(x, w, 1e-6, zero_centered=False, residual=r)
    torch.testing.assert_close(h, x + r)
    expected = (x + r) * torch.rsqrt((x + r).pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(y, expected, **TOL)


def test_gated_rms_norm_matches_module():
    x, z = torch.randn(6, 64), torch.randn(6, 64)
    module = qwen.Qwen3_5RMSNormGated(64, eps=1e-6)
    torch.nn.init.normal_(module.weight, mean=1.0, std=0.1)
    torch.testing.assert_close(
        gated_rms_norm(x, z, module.weight.detach(), 1e-6), module(x, z).detach(), **TOL
    )


def test_rotary_matches_partial_rotate_half():
    x = torch.randn(2, 7, 3, 32)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [40, 41, 42, 43, 44, 45, 46]])
    inv_freq = 1.0 / (10_000 ** (torch.arange(0, 8, 2).float() / 8))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    expected, _ = qwen.apply_rotary_pos_emb(x, x, emb.cos(), emb.sin(), unsqueeze_dim=2)
    torch.testing.assert_close(rotary_embedding(x, positions, inv_freq), expected, **TOL)


def test_attention_matches_eager_with_prefix_per_row():
    batch, new, q_heads, kv_heads, dim, max_len = 2, 5, 4, 2, 16, 24
    start = torch.tensor([0, 9])
    q, gate = torch.randn(batch, new, q_heads, dim), torch.randn(batch, new, q_heads, dim)
    k_cache, v_cache = torch.randn(batch, kv_heads, max_len, dim), torch.randn(batch, kv_heads, max_len, dim)
    out = attention(q, k_cache, v_cache, gate, start, dim**-0.5)
    for row in range(batch):
        length = int(start[row]) + new
        keys = k_cache[row : row + 1, :, :length].repeat_interleave(q_heads // kv_heads, dim=1)
        values = v_cache[row : row + 1, :, :length].repeat_interleave(q_heads // kv_heads, dim=1)
        mask = torch.full((new, length), float("-inf")).triu(int(start[row]) + 1)
        module = torch.nn.Module()
        module.num_key_value_groups, module.training = 1, False
        expected, _ = qwen.eager_attention_forward(
            module, q[row : row + 1].transpose(1, 2), keys, values, mask, scaling=dim**-0.5
        )
        expected = expected * torch.sigmoid(gate[row : row + 1])
        torch.testing.assert_close(out[row : row + 1], expected, **TOL)


def test_causal_conv1d_matches_prefill_then_update():
    channels, width, batch = 12, 4, 2
    weight = torch.randn(channels, width)
    x = torch.randn(batch, 9, channels)
    state = torch.zeros(batch, channels, width - 1)
    out = causal_conv1d(x[:, :7], weight, state)
    expected = qwen.causal_conv1d_fn(x[:, :7].transpose(1, 2), weight, activation="silu").transpose(1, 2)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(state, x[:, 4:7].transpose(1, 2))
    hf_state = torch.cat((torch.zeros(batch, channels, 1), x[:, 4:7].transpose(1, 2)), dim=-1)
    for t in (7, 8):
        step = causal_conv1d(x[:, t : t + 1], weight, state)
        hf_step = qwen.causal_conv1d_update(
            x[:, t : t + 1].transpose(1, 2), hf_state, weight, activation="silu"
        )
        torch.testing.assert_close(step, hf_step.transpose(1, 2), **TOL)
    torch.testing.assert_close(state, x[:, 6:9].transpose(1, 2))


def _gdn_inputs(batch, length, key_heads, value_heads, key_dim, value_dim):
    q = torch.randn(batch, length, key_heads, key_dim)
    k = torch.randn(batch, length, key_heads, key_dim)
    v = torch.randn(batch, length, value_heads, value_dim)
    a, b = torch.randn(batch, length, value_heads), torch.randn(batch, length, value_heads)
    A_log, dt_bias = torch.rand(value_heads).log(), torch.rand(value_heads)
    state = torch.randn(batch, value_heads, key_dim, value_dim) * 0.1
    return q, k, v, a, b, A_log, dt_bias, state


@pytest.mark.parametrize("length", [1, 70, 128])
def test_gated_delta_rule_matches_transformers(length):
    q, k, v, a, b, A_log, dt_bias, state = _gdn_inputs(2, length, 2, 4, 16, 8)
    g = -A_log.exp() * F.softplus(a + dt_bias)
    hf = qwen.torch_recurrent_gated_delta_rule if length == 1 else qwen.torch_chunk_gated_delta_rule
    # Each query/key head serves consecutive value heads; transformers before 5.24 expects them repeated already.
    group = v.shape[2] // k.shape[2]
    expected, expected_state = hf(
        q.repeat_interleave(group, dim=2),
        k.repeat_interleave(group, dim=2),
        v,
        g=g,
        beta=b.sigmoid(),
        initial_state=state.clone(),
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    out = gated_delta_rule(q, k, v, a, b, A_log, dt_bias, state)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, expected_state, rtol=1e-4, atol=1e-4)


def test_gated_delta_rule_chunked_equals_token_loop():
    prepared = prepare(*_gdn_inputs(1, 100, 2, 2, 16, 16)[:7])
    initial = torch.randn(1, 2, 16, 16) * 0.1
    out_chunk, state_chunk = chunked(*prepared, initial)
    out_loop, state_loop = recurrent(*prepared, initial)
    torch.testing.assert_close(out_chunk, out_loop, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state_chunk, state_loop, rtol=1e-4, atol=1e-4)

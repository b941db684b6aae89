"""Inputs of the fused CPU steps' tests, shared with the other-instruction-set check, and the torch reference as a
context."""

from __future__ import annotations

import contextlib

import torch

import kernels


@contextlib.contextmanager
def torch_reference():
    """Every entry point on its torch reference (no C++ kernels) inside the block."""
    previous = kernels.get_backend()
    kernels.set_backend("torch")
    try:
        yield
    finally:
        kernels.set_backend(previous)


def layer_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype, seed, width=4):
    """A Gated DeltaNet layer's projection output and its weights and states (entry point's argument order)."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator) * scale).to(dtype)

    channels = 2 * key_heads * key_dim + value_heads * value_dim
    projected = rand(batch, tokens, channels + value_heads * value_dim + 2 * value_heads)
    conv_weight = rand(channels, width, scale=0.5)
    conv_state = rand(batch, channels, width - 1)
    A_log = torch.rand(value_heads, generator=generator).mul(0.1).add(0.01).log()
    dt_bias = torch.rand(value_heads, generator=generator) * 30  # past softplus's threshold too
    state = torch.randn(batch, value_heads, key_dim, value_dim, generator=generator) * 0.2
    norm_weight = rand(value_dim)
    return [projected, conv_weight, conv_state, A_log, dt_bias, state, norm_weight, 1e-6]


def trails(args, tokens):
    """NaN-poisoned conv and recurrent trails of `tokens` tokens for the layer inputs `args`."""
    conv_state, state = args[2], args[5]
    conv = torch.full((state.shape[0], tokens, *conv_state.shape[1:]), float("nan"), dtype=conv_state.dtype)
    return conv, torch.full((state.shape[0], tokens, *state.shape[1:]), float("nan"))


def copies(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]

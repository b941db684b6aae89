"""Gated delta rule benchmark: chunked prefill over 400-8192 tokens and the fused one-token decode step."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from benchmarks.kernels.harness import Case, compiled, optional_module
from benchmarks.kernels.shapes import GDN_HEAD_DIM, GDN_HEADS, GDN_LENGTHS
from kernels.ops.gated_delta_rule import gated_delta_rule_chunk_triton, gated_delta_rule_recurrent_triton
from kernels.reference.gated_delta_rule import gated_delta_rule


def _inputs(tokens: int, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    shape = (1, tokens, GDN_HEADS)
    q, k, v = (torch.randn(*shape, GDN_HEAD_DIM, device=device, dtype=dtype) for _ in range(3))
    a, b = (torch.randn(*shape, device=device, dtype=dtype) for _ in range(2))
    A_log = torch.rand(GDN_HEADS, device=device).mul(15).add(0.5).log()
    dt_bias = torch.rand(GDN_HEADS, device=device)
    state = torch.zeros(1, GDN_HEADS, GDN_HEAD_DIM, GDN_HEAD_DIM, device=device)
    return q, k, v, a, b, A_log, dt_bias, state


def _io_bytes(q: torch.Tensor, state: torch.Tensor) -> float:
    # q, k, v read and o written once, a and b read; the fp32 state read and written.
    return 4 * q.numel() * q.element_size() + 2 * state.numel() * 4


def _fla_chunk(fla, q, k, v, a, b, A_log, dt_bias, state):
    g = -A_log.exp() * F.softplus(a.float() + dt_bias)
    out, _ = fla.chunk_gated_delta_rule(
        q, k, v, g, b.sigmoid(), initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    return out


def cases(device: str, dtype: torch.dtype, quick: bool) -> Iterator[Case]:
    fla = optional_module("fla.ops.gated_delta_rule")
    for tokens in GDN_LENGTHS[:2] if quick else GDN_LENGTHS:
        inputs = _inputs(tokens, device, dtype)
        impls = {
            "triton": lambda i=inputs: gated_delta_rule_chunk_triton(*i),
            "torch eager": lambda i=inputs: gated_delta_rule(*i),
        }
        if fla is not None:
            impls["fla"] = lambda i=inputs: _fla_chunk(fla, *i)
        yield Case(
            "gdn chunked prefill", f"T={tokens} H={GDN_HEADS}", _io_bytes(inputs[0], inputs[-1]), 0, impls
        )

    inputs = _inputs(1, device, dtype)
    step_compiled = compiled(gated_delta_rule)
    impls = {
        "triton": lambda i=inputs: gated_delta_rule_recurrent_triton(*i),
        "torch eager": lambda i=inputs: gated_delta_rule(*i),
        "torch.compile": lambda i=inputs: step_compiled(*i),
    }
    if fla is not None:
        impls["fla"] = lambda i=inputs: fla.fused_recurrent_gated_delta_rule(
            i[0], i[1], i[2], -i[5].exp() * F.softplus(i[3].float() + i[6]), i[4].sigmoid(),
            initial_state=i[7], output_final_state=True, use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
    yield Case("gdn decode step", f"B=1 H={GDN_HEADS}", _io_bytes(inputs[0], inputs[-1]), 0, impls)

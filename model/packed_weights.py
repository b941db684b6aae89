"""bf16 weights packed once at load into oneDNN's blocked layout, for CPUs that multiply bf16 natively.

F.linear on a plain row-major bf16 weight runs oneDNN's kernel for an arbitrary layout; packed into the layout
its AVX-512 BF16 / AMX kernel reads, the same products stream the weights faster, and they are nearly all of a
decode step (benchmarks.model_cpu --real-size measures it). Packing replaces the plain tensor, so it costs no
memory; an LM head tied to the embedding stays plain, as the embedding lookup reads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from model.cpu import native_bf16

log = logging.getLogger(__name__)

# Rows of a typical input the layout is chosen for: a decode step multiplies one row per sequence.
PACKED_FOR_ROWS = 1


@dataclass(frozen=True)
class PackedWeight:
    """A [N, K] bf16 weight in oneDNN's opaque packed layout."""

    packed: torch.Tensor
    shape: torch.Size
    nbytes: int


def _reorder(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def packing_applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether weights of dtype on device are packed: bf16 on a CPU that multiplies it natively."""
    return (
        device.type == "cpu"
        and dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and native_bf16()
    )


def pack_weight(weight: torch.Tensor) -> PackedWeight:
    """weight ([N, K] bf16, on the CPU) in the packed layout."""
    packed = _reorder(weight, PACKED_FOR_ROWS)
    return PackedWeight(packed, weight.shape, weight.numel() * weight.element_size())


def pack_projections(weights: dict) -> None:
    """Pack every projection, and the LM head unless it is the embedding, in place."""
    names = [name for name in weights if name.endswith("proj.weight")]
    if weights["lm_head.weight"] is not weights["embed_tokens.weight"]:
        names.append("lm_head.weight")
    try:
        weights[names[0]] = pack_weight(weights[names[0]])
    except RuntimeError as error:  # a oneDNN build that cannot pack for this CPU: plain weights still work
        log.info("bf16 weights stay in their plain layout: oneDNN cannot pack them here (%s)", error)
        return
    for name in names[1:]:  # one at a time, so that only one matrix is held twice
        weights[name] = pack_weight(weights[name])
    log.info("bf16 weights: %d matrices packed in oneDNN's layout for this CPU", len(names))


def packed_linear(x: torch.Tensor, weight: PackedWeight) -> torch.Tensor:
    """x @ weight.T, in x's dtype (the product itself takes bf16 inputs only)."""
    out_features, in_features = weight.shape
    flat = x.reshape(-1, in_features).to(torch.bfloat16).contiguous()
    out = torch.ops.mkldnn._linear_pointwise(flat, weight.packed, None, "none", [], "")
    return out.view(*x.shape[:-1], out_features).to(x.dtype)

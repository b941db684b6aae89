"""The weight-streaming floor of a CPU decode token: one bare pass of matrix-vector products over every weight
matrix the token reads, in the engine's own storage (fp32, bf16, packed bf16 or int8)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from model.int8_weights import Int8Weight
from model.linear import Weight, linear
from model.packed_weights import PackedWeight


def weight_stream(matrices: Iterable[Weight], dtype: torch.dtype) -> tuple[int, Callable[[], None]]:
    """Bytes of the distinct matrices and a function that multiplies one dtype vector by each of them.

    Any engine storing the weights this way pays at least that pass's time per token, whatever it does
    around the products (a tied embedding is read once, as the head).
    """
    distinct = {}
    for weight in matrices:
        if isinstance(weight, PackedWeight):
            distinct[id(weight)] = weight  # a packed copy is never shared, and has no data pointer
            continue
        storage = weight.values if isinstance(weight, Int8Weight) else weight
        distinct[storage.data_ptr()] = weight
    inputs = {w.shape[1]: torch.randn(1, w.shape[1], dtype=dtype) for w in distinct.values()}

    @torch.inference_mode()
    def stream() -> None:
        for weight in distinct.values():
            linear(inputs[weight.shape[1]], weight)

    return sum(w.nbytes for w in distinct.values()), stream

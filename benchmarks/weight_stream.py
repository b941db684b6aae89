"""The weight-streaming floor of a CPU decode token: one bare pass of matrix-vector products over every weight
matrix the token reads, in the engine's own storage (plain, or a CpuWeight: bf16, int8, int4 or int6)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from model.linear import Weight, linear


def weight_stream(matrices: Iterable[Weight], dtype: torch.dtype) -> tuple[int, Callable[[], None]]:
    """Bytes of the distinct matrices and a function that multiplies one dtype vector by each of them.

    Any engine storing the weights this way pays at least that pass's time per token, whatever it does
    around the products (a tied embedding is read once, as the head).
    """
    distinct = {}
    for weight in matrices:
        distinct[weight.data_ptr() if isinstance(weight, torch.Tensor) else id(weight)] = weight
    inputs = {w.shape[1]: torch.randn(1, w.shape[1], dtype=dtype) for w in distinct.values()}

    @torch.inference_mode()
    def stream() -> None:
        for weight in distinct.values():
            linear(inputs[weight.shape[1]], weight)

    return sum(w.nbytes for w in distinct.values()), stream

"""A CPU stand-in for CUDA-graph capture: it records the aten ops of one call of a step and replays exactly them.

Like a real graph, a replay repeats the recorded kernels on the recorded tensors: Python control flow and
every value the host saw are frozen at capture time, intermediates are recomputed, and the tensors that
existed before the capture (buffers, caches, weights) are read and written in place. Reading a device value
on the host while capturing raises, as CUDA does ("operation not permitted when stream is capturing").
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

aten = torch.ops.aten

# Ops whose result the host must wait for on a GPU (a value or a data-dependent shape).
HOST_READ_OPS = {
    aten.item,
    aten._local_scalar_dense,
    aten.is_nonzero,
    aten.nonzero,
    aten.masked_select,
    aten.unique_dim,
    aten._unique2,
    aten.unique_consecutive,
    aten.equal,
}

# Tensor methods that copy device data to the host without going through an aten op the mode sees.
HOST_READ_METHODS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__")


class HostReadError(RuntimeError):
    """A device value was read on the host while a step was being captured."""


def _is_host_read(func, args: tuple, kwargs: dict) -> bool:
    if func.overloadpacket in HOST_READ_OPS:
        return True
    if (
        func in (aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor)
        and "output_size" not in kwargs
    ):
        return True  # counts in a tensor: the output's size is their sum (a count given as an int is not)
    if func.overloadpacket in (aten.index, aten.index_put, aten.index_put_):
        # Boolean-mask indexing turns the mask into indices on the host.
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices if i is not None)
    return False


class _ForbidHostReads(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _is_host_read(func, args, kwargs):
            raise HostReadError(
                f"{func} reads a device value on the host: operation not permitted while capturing"
            )
        return func(*args, **kwargs)


@contextmanager
def no_host_reads() -> Iterator[None]:
    """Raise HostReadError on any host read of tensor data inside the block (ops and Tensor methods)."""
    saved = {name: torch.Tensor.__dict__.get(name) for name in HOST_READ_METHODS}

    def refuse(name: str) -> Callable:
        def method(self, *args, **kwargs):
            raise HostReadError(
                f"Tensor.{name}() reads a device value on the host: not permitted while capturing"
            )

        return method

    for name in HOST_READ_METHODS:
        setattr(torch.Tensor, name, refuse(name))
    try:
        with _ForbidHostReads():
            yield
    finally:
        for name, original in saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out


class RecordedStep:
    """The ops of one recorded call; calling it replays them on the same static tensors.

    Each op's arguments are flattened once, here: a replay only swaps in the tensors that earlier ops of the same
    replay produced afresh (the intermediates), at positions found at record time."""

    def __init__(self, ops: list[tuple]) -> None:
        self.ops = ops  # keeps every recorded tensor alive, so their ids stay unique
        producer: dict[int, tuple[int, int]] = {}  # id of a recorded output -> (op, leaf) that makes it
        self._plan = []
        for index, (func, args, kwargs, out) in enumerate(ops):
            leaves, spec = tree_flatten((args, kwargs))
            fresh = [(at, producer[id(leaf)]) for at, leaf in enumerate(leaves)
                     if isinstance(leaf, torch.Tensor) and id(leaf) in producer]  # fmt: skip
            self._plan.append((func, leaves, spec, fresh))
            for at, leaf in enumerate(tree_leaves(out)):
                if isinstance(leaf, torch.Tensor):
                    producer[id(leaf)] = (index, at)

    def __call__(self) -> None:
        outputs: list[list] = []
        for func, leaves, spec, fresh in self._plan:
            if fresh:
                leaves = list(leaves)
                for at, (index, leaf) in fresh:
                    leaves[at] = outputs[index][leaf]
            args, kwargs = tree_unflatten(leaves, spec)
            outputs.append(tree_leaves(func(*args, **kwargs)))


class EmulatedCapture:
    """Captures steps the way model.cuda_graph.CudaGraphCapture does, on the CPU: `warmup` eager calls, then
    one recorded call (which, unlike CUDA's, also executes: a stricter test), then replays of the recording.
    `captures` counts the steps captured, and `captured` them by the class whose method made the step
    (DecodeWorkspace, VerifySteps, AppendSteps); `replayed_ops` and `replayed_seconds` are what all replays have run
    and taken so far.
    """

    def __init__(self, warmup: int = 2) -> None:
        self.warmup = warmup
        self.captures = 0
        self.captured: Counter[str] = Counter()
        self.replayed_ops = 0
        self.replayed_seconds = 0.0

    def capture(self, step: Callable[[], None]) -> Callable[[], None]:
        for _ in range(self.warmup):
            step()
        recorder = _Recorder()
        with no_host_reads(), recorder:
            step()
        self.captures += 1
        self.captured[step.__qualname__.split(".")[0]] += 1
        recorded = RecordedStep(recorder.ops)

        def replay() -> None:
            started = time.perf_counter()
            recorded()
            self.replayed_seconds += time.perf_counter() - started
            self.replayed_ops += len(recorded.ops)

        return replay

"""Captures a fixed-shape step (the batched one-token decode) as a CUDA graph and replays it."""

from __future__ import annotations

from collections.abc import Callable

import torch


class CapturedStep:
    """Replays `step` from a CUDA graph; step must read and write only tensors that outlive the graph.

    step runs a few times on a side stream before capture (Triton compiles, allocator warms up), so it must
    be harmless to run then: the decode step is captured with every row sitting out.
    """

    def __init__(self, step: Callable[[], None], *, pool=None, warmup: int = 2) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            step()

    def __call__(self) -> None:
        self.graph.replay()

"""Captures a fixed-shape step (the batched one-token decode) as a CUDA graph that later calls replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch


class StepCapture(Protocol):
    """Turns a step into a replayable one; the engine asks once per batch size and sampling mode."""

    def capture(self, step: Callable[[], None]) -> Callable[[], None]: ...


class CudaGraphCapture:
    """Captures steps as CUDA graphs that share one memory pool (they never run at the same time).

    A step must read and write only tensors that outlive its graph, and must be harmless to run: it runs
    `warmup` times on a side stream before the capture (Triton compiles, the allocator warms up).
    """

    def __init__(self, warmup: int = 2) -> None:
        self.warmup = warmup
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, step: Callable[[], None]) -> Callable[[], None]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            step()
        return graph.replay

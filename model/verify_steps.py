"""Verify passes over a capturing decoder's cache, one captured step per width (1 to K + 1 tokens a row), so that
speculative decoding on a GPU replays graphs as plain decoding does instead of launching every kernel from the
host (an eager pass of the real-size model costs about eight captured steps on an H200)."""

from __future__ import annotations

import torch

from model.cache import ModelCache, StateTrail
from model.cuda_graph import StepCapture
from model.qwen35 import Qwen35Model


class VerifySteps:
    """The static buffers of a verify pass (tokens, positions, rows taking part, logits of every position, the
    GDN states after each token) and one captured step per width over `cache`, the workspace that a capturing
    decoder of the same batch size holds (its lock guards both).

    Each position attends over the whole cache under its device-side mask, as the captured one-token step does,
    so a pass rounds as the steps it stands for. A width-1 pass is that step with logits and no trail. The
    steps are warmed up and recorded with every row sitting out at `scratch`, the first of the cache's positions
    past the longest session: they write only scratch keys, the trail, and GDN states that the masked update
    leaves as they are.
    """

    def __init__(
        self, model: Qwen35Model, cache: ModelCache, capture: StepCapture, max_width: int, scratch: int
    ) -> None:
        if scratch + max_width > cache.max_tokens:
            raise ValueError(f"{max_width} scratch positions from {scratch} overrun {cache.max_tokens}")
        self.model = model
        self.cache = cache
        self.capture = capture
        self.max_width = max_width
        self.scratch = scratch
        batch = cache.batch_size
        device = model.device
        self.trail = StateTrail(model.config, batch, max_width, device, model.dtype)
        self.tokens = torch.zeros(batch, max_width, dtype=torch.long, device=device)
        self.start = torch.zeros(batch, dtype=torch.long, device=device)
        self.active = torch.zeros(batch, dtype=torch.bool, device=device)
        self.logits = torch.zeros(batch, max_width, model.config.vocab_size, device=device)
        self._replays: dict[int, object] = {}

    def capture_all(self) -> None:
        """Capture every width's step now (RuntimeError when a capture fails), before any session's state is in
        the cache."""
        for width in range(1, self.max_width + 1):
            if width not in self._replays:
                self._replays[width] = self._capture(width)

    def _capture(self, width: int):
        model, cache, tokens, logits = self.model, self.cache, self.tokens, self.logits
        trail = None if width == 1 else self.trail.resize(width)
        bounds = [cache.max_tokens] * width

        def step() -> None:
            if width == 1:
                out = model.decode(tokens[:, :1], self.start, cache, active=self.active)
                logits[:, 0].copy_(out)
            else:
                out = model.verify(
                    tokens[:, :width], self.start, cache, step_bounds=bounds, trail=trail, active=self.active
                )
                logits[:, :width].copy_(out)

        self.start.fill_(self.scratch)
        self.active.zero_()
        return self.capture.capture(step)

    def run(self, fed: list[list[int]], processed: list[int], active: list[bool]) -> torch.Tensor:
        """Replay the pass of fed [B, W] at positions processed[b] + t, rows with active False sitting out; the
        logits [B, W, V] of every position. The trail then holds each token's states (see StateTrail.keep_)."""
        width = len(fed[0])
        device = self.tokens.device
        self.tokens[:, :width].copy_(torch.tensor(fed, dtype=torch.long, device=device))
        self.start.copy_(torch.tensor(processed, dtype=torch.long, device=device))
        self.active.copy_(torch.tensor(active, device=device))
        self._replays[width]()
        self.trail.resize(width)  # the views this width's step wrote through
        return self.logits[:, :width]

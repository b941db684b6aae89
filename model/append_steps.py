"""Short appends (a tool result, a user's turn) as replays of captured prefills over the engine's workspace: a row's
tokens in power-of-two pieces, one captured prefill per (row, piece length), so that an agent's turn is a few
replays and two copies where an eager prefill launches some thousand kernels from the host."""

from __future__ import annotations

from collections.abc import Callable

import torch

from model.cache import ModelCache
from model.cuda_graph import StepCapture
from model.qwen35 import Qwen35Model

# Appends of up to this many tokens a row are replayed (in at most log2 of it pieces); a longer one, such as a
# prompt, is prefilled eagerly, where the device's arithmetic outweighs the host's launches.
MAX_REPLAYED_APPEND = 1023


def pieces(count: int) -> list[tuple[int, int]]:
    """(offset, length) of count tokens cut into the powers of two of its binary form, largest first: 400 gives
    (0, 256), (256, 128), (384, 16)."""
    cut, offset = [], 0
    for bit in reversed(range(count.bit_length())):
        if count >> bit & 1:
            cut.append((offset, 1 << bit))
            offset += 1 << bit
    return cut


class AppendSteps:
    """The captured prefills of pieces of one row of a workspace cache, made on first use and replayed with the
    piece's tokens and its position in static buffers; the logits of the piece's last token land in `logits`.

    A capture runs its prefill (warm-up and recording) with the piece placed at the cache's last positions: that
    writes scratch keys there and moves the row's Gated DeltaNet states, both of which the caller's copy of a
    session's state into the workspace, after the captures and before the replays, overwrites or never reads.
    """

    def __init__(self, model: Qwen35Model, cache: ModelCache, capture: StepCapture) -> None:
        self.model = model
        self.cache = cache
        self.capture = capture
        device = model.device
        self.start = torch.zeros(1, dtype=torch.long, device=device)
        self.logits = torch.zeros(1, model.config.vocab_size, device=device)
        self._tokens: dict[int, torch.Tensor] = {}
        self._last: dict[int, torch.Tensor] = {}
        self._steps: dict[tuple[int, int], Callable[[], None]] = {}

    def prepare(self, rows: list[list[int]]) -> None:
        """Capture every piece the rows' tokens need that is not captured yet; RuntimeError when a capture fails.
        Call it before copying a session's state in: a capture disturbs the workspace."""
        for row, tokens in enumerate(rows):
            for _, length in pieces(len(tokens)):
                if (row, length) not in self._steps:
                    self._steps[row, length] = self._capture(row, length)

    def run(self, row: int, tokens: list[int], start: int) -> torch.Tensor:
        """Replay the pieces of tokens placed at positions start.. of the row (prepared); the next-token logits
        [1, V] of its last token."""
        for offset, length in pieces(len(tokens)):
            # Made on the host: one copy to the device.
            piece = torch.tensor([tokens[offset : offset + length]])
            self._tokens[length].copy_(piece)
            self.start.fill_(start + offset)
            self._steps[row, length]()
        return self.logits

    def _capture(self, row: int, length: int) -> Callable[[], None]:
        device = self.model.device
        if length not in self._tokens:
            self._tokens[length] = torch.zeros(1, length, dtype=torch.long, device=device)
            self._last[length] = torch.full((1,), length - 1, dtype=torch.long, device=device)
        tokens, last, row_cache = self._tokens[length], self._last[length], self.cache.row(row)

        def prefill() -> None:
            self.logits.copy_(self.model.prefill(tokens, self.start, row_cache, last))

        self.start.fill_(self.cache.max_tokens - length)
        return self.capture.capture(prefill)

"""The batched one-token decode of a session's rows: the static buffers every step reads and writes, and one step
per sampling mode and stop-list width, captured as a CUDA graph when the engine captures its steps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from model.cache import ModelCache
from model.cuda_graph import StepCapture
from model.decode_step import StepBuffers, compiled_decode_step, decode_step
from model.qwen35 import Qwen35Model
from model.sampling import sampling_mode
from model.sampling_params import SamplingParams

# Width of the stop-id buffer a decode step compares against (padded with -1): stop lists up to this long
# share one step; a longer one gets the next power of two.
STOP_SLOTS = 8


def stop_width(count: int) -> int:
    """Slots of the stop-id buffer for count stop ids."""
    return max(STOP_SLOTS, 1 << (count - 1).bit_length())


@dataclass(frozen=True)
class PreparedStep:
    """One decode step and the buffers only it uses: noise (None when greedy) and the stop ids.

    run(kv_bound) takes a host-side bound on the KV positions the step reads and writes: an eager step
    attends over only those, a replayed graph over the whole cache under its device-side mask.
    """

    run: Callable[[int], None]
    noise: torch.Tensor | None
    stop: torch.Tensor


class DecodeWorkspace:
    """The batched one-token decode of B rows over one cache: the static buffers every step reads and writes,
    and one step per (sampling mode, stop-list width), captured when the workspace has a StepCapture.

    A captured step replays fixed kernels on fixed addresses, so a capturing workspace belongs to the engine,
    one per batch size, and is shared by the sessions of that size in turn (as gpt-fast and nano-vllm keep
    one static cache per batch size): generate() copies the session's state in (its used KV prefix and the
    GDN states), replays the step, and copies the new KV positions and the GDN states back. The copies cost
    O(used tokens) per generate() call, small next to the decode steps they serve, and no session's only copy
    of its state is ever in the shared cache. A session without captured steps decodes in its own cache
    through a workspace of its own.

    The cache's last KV position is spare, never a real token: a row sitting out a step writes its scratch
    key at its own length (at most the spare), and a capture runs with every row sitting out at the spare
    position, so the capture's warm-up and recording write only the spare slot, the spare output column and
    GDN states that the masked update leaves as they are (and that the copy-in overwrites before use).
    """

    def __init__(
        self,
        model: Qwen35Model,
        cache: ModelCache,
        capture: StepCapture | None = None,
        compiled: bool = False,
    ) -> None:
        """compiled: run the step through torch.compile (a workspace that does not capture)."""
        self.model = model
        self.cache = cache
        self.capture = capture
        self.compiled = compiled and capture is None
        self.lock = threading.Lock()
        batch = cache.batch_size
        device = model.device
        self.spare = cache.max_tokens - 1
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.start = torch.zeros(batch, dtype=torch.long, device=device)
        self.active = torch.zeros(batch, dtype=torch.bool, device=device)
        self.generated = torch.zeros(batch, dtype=torch.long, device=device)
        self.limit = torch.zeros(batch, dtype=torch.long, device=device)
        # Column `spare` takes the tokens sampled for rows that sit out.
        self.out = torch.zeros(batch, cache.max_tokens, dtype=torch.long, device=device)
        self.temperature = torch.ones(1, device=device)
        self.top_p = torch.ones(1, device=device)
        self.buffers = StepBuffers(
            self.tokens,
            self.start,
            self.active,
            self.generated,
            self.limit,
            self.out,
            self.temperature,
            self.top_p,
        )
        self._steps: dict[tuple, PreparedStep] = {}

    @property
    def captured(self) -> bool:
        return self.capture is not None

    def step(self, sampling: SamplingParams, stop_width: int) -> PreparedStep:
        """The step for sampling's mode and stop_width stop ids, made (and captured) on first use; RuntimeError
        when the capture fails."""
        mode = sampling_mode(sampling, self.model.config.vocab_size)
        key = (mode, stop_width)
        if key in self._steps:
            return self._steps[key]
        sampling = replace(sampling)  # the step keeps the settings of its mode, whatever the caller changes
        device = self.model.device
        batch = self.cache.batch_size
        noise = None if mode is None else torch.ones(batch, mode[0], device=device)
        stop = torch.full((stop_width,), -1, dtype=torch.long, device=device)
        captured = self.captured

        def run(kv_bound: int | None = None) -> None:
            # An eager step may look at the host: when every row runs, the sit-out masking is skipped.
            masked = captured or self.compiled or not bool(self.active.all())
            cache = self.cache if kv_bound is None else self.cache.prefix(kv_bound)
            step = compiled_decode_step() if self.compiled else decode_step
            step(self.model, cache, self.buffers, stop, self.spare, sampling, noise, masked)

        if captured:
            # Every row sits out at the spare position while the step is warmed up and recorded.
            self.start.fill_(self.spare)
            self.active.zero_()
            self.generated.zero_()
            self.limit.zero_()
            self.temperature.fill_(1.0)
            self.top_p.fill_(1.0)
            replay = self.capture.capture(run)
            entry = PreparedStep(lambda kv_bound: replay(), noise, stop)
        else:
            entry = PreparedStep(run, noise, stop)
        self._steps[key] = entry
        return entry

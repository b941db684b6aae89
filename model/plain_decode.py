"""A session's generate() when its engine does not speculate: every row's tokens one batched decode step at a
time, replayed in the engine's captured workspace when the session fits it, else run in its own cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from model.decode_step import is_stop
from model.decode_workspace import DecodeWorkspace, PreparedStep, stop_width
from model.sampling import draw_noise, sample
from model.sampling_params import SamplingParams

if TYPE_CHECKING:
    from model.session import Session


class PlainDecoding:
    """The generate() of a session whose engine does not speculate (the session holds it as its decoding), and
    the session's own workspace when it decodes outside the engine's workspace."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._eager: DecodeWorkspace | None = None

    def runs_pending_in_step(self, rows: list[int]) -> bool:
        """Whether the call's first step runs the rows' pending tokens: a captured step does when each row asked
        for has one (run apart, it would be an eager forward pass, several replayed steps' time on a GPU, once per
        call: the scheduler calls every 16 tokens)."""
        pending = self.session.pending
        return self.workspace().captured and all(len(pending[r]) == 1 for r in rows)

    def generate(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        pending_in_step: bool,
    ) -> list[list[int]]:
        """Up to limit_per_row[r] tokens for each of rows (see Session.generate)."""
        s = self.session
        workspace = self.workspace()
        stop = sorted(stop_ids) or [-1]
        with workspace.lock:
            try:
                step = workspace.step(sampling, stop_width(len(stop)))
            except RuntimeError as error:
                if not workspace.captured:
                    raise
                s.engine.stop_capturing(error)
                workspace.capture = None  # this call still decodes, eagerly, in the dropped workspace
                step = workspace.step(sampling, stop_width(len(stop)))
                if pending_in_step:
                    s.append([[] for _ in range(s.batch_size)] if s.batch_size > 1 else [])
                    pending_in_step = False
            return self._decode(rows, limit_per_row, sampling, stop, workspace, step, pending_in_step)

    def _decode(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop: list[int],
        workspace: DecodeWorkspace,
        step: PreparedStep,
        pending_in_step: bool,
    ) -> list[list[int]]:
        """Decode in workspace's buffers; pending_in_step: every row asked for has one pending token, which the
        first step runs (sampling the call's first token) in place of an append."""
        s = self.session
        device = s.engine.device
        shared = workspace.cache is not s.cache
        longest = max(s.processed)
        if shared:
            workspace.cache.copy_prefix_(s.cache, longest)
        step.stop.fill_(-1)
        step.stop[: len(stop)].copy_(torch.tensor(stop, dtype=torch.long, device=device))
        workspace.temperature.fill_(sampling.temperature)
        workspace.top_p.fill_(sampling.top_p)
        noise = step.noise
        generator = None
        if noise is not None:
            generator = s.noise_generator(sampling)
            draw_noise(noise, generator)
        workspace.limit.copy_(torch.tensor(limit_per_row, device=device))
        workspace.start.copy_(torch.tensor(s.processed, device=device))
        selected = workspace.limit > 0
        if pending_in_step:
            pending = [row[0] if row else 0 for row in s.pending]
            workspace.tokens.copy_(torch.tensor(pending, dtype=torch.long, device=device))
            workspace.generated.zero_()
            workspace.active.copy_(selected)
        else:
            first = sample(
                s.last_logits, sampling, noise, temperature=workspace.temperature, top_p=workspace.top_p
            )
            workspace.tokens.copy_(first)
            workspace.out[:, 0] = first
            workspace.generated.copy_(selected.long())
            workspace.active.copy_(
                selected & ~is_stop(first, step.stop) & (workspace.generated < workspace.limit)
            )
        for done in range(0 if pending_in_step else 1, max(limit_per_row)):
            if noise is not None and done > 0:  # the noise drawn above serves the call's first token
                draw_noise(noise, generator)
            step.run(longest + done + int(pending_in_step))
            if done and done % s.engine.sync_every == 0 and not bool(workspace.active.any()):
                break
        generated = workspace.generated.tolist()
        starts = workspace.start.tolist()
        if shared:
            # Entries past a row's new length are scratch: copying them along is harmless.
            s.cache.copy_span_(workspace.cache, min(s.processed), max(starts))
        outputs = workspace.out[:, : max(generated)].cpu()
        result = []
        for r in rows:
            tokens = outputs[r, : generated[r]].tolist()
            s.processed_tokens += starts[r] - s.processed[r]
            s.processed[r] = starts[r]
            if tokens:  # a row that got no token keeps the one it may have pending
                s.pending[r] = tokens[-1:]
            result.append(tokens)
        return result

    def workspace(self) -> DecodeWorkspace:
        """The engine's capturing workspace for this batch size when the session decodes in the engine's workspace,
        else the session's own, which decodes in its cache."""
        s = self.session
        if s.decodes_in_workspace:
            return s.engine.workspace(s.batch_size)
        if self._eager is None:
            self._eager = DecodeWorkspace(s.model, s.cache, compiled=s.engine.options.compile)
        return self._eager

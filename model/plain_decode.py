"""A session's generate() when its engine does not speculate: every row's tokens one batched decode step at a
time, replayed in the engine's captured workspace when the session fits it, else run in its own cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from model.decode_step import is_stop
from model.decoder import Decoder, DecodeStep, stop_width
from model.sampling import draw_noise, sample
from model.sampling_params import SamplingParams

if TYPE_CHECKING:
    from model.session import Session


class PlainDecoding:
    """The generate() of a session whose engine does not speculate (the session holds it as its decoding), and
    the session's own decoder when it decodes outside the engine's workspace."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._eager: Decoder | None = None

    def runs_pending_in_step(self, rows: list[int]) -> bool:
        """Whether the call's first step runs the rows' pending tokens: a captured step does when each row asked
        for has one (run apart, it would be an eager forward pass, several replayed steps' time on a GPU, once per
        call: the scheduler calls every 16 tokens)."""
        pending = self.session.pending
        return self.decoder().captured and all(len(pending[r]) == 1 for r in rows)

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
        decoder = self.decoder()
        stop = sorted(stop_ids) or [-1]
        with decoder.lock:
            try:
                step = decoder.step(sampling, stop_width(len(stop)))
            except RuntimeError as error:
                if not decoder.captured:
                    raise
                s.engine.stop_capturing(error)
                decoder.capture = None  # this call still decodes, eagerly, in the dropped workspace
                step = decoder.step(sampling, stop_width(len(stop)))
                if pending_in_step:
                    s.append([[] for _ in range(s.batch_size)] if s.batch_size > 1 else [])
                    pending_in_step = False
            return self._decode(rows, limit_per_row, sampling, stop, decoder, step, pending_in_step)

    def _decode(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop: list[int],
        decoder: Decoder,
        step: DecodeStep,
        pending_in_step: bool,
    ) -> list[list[int]]:
        """Decode in decoder's buffers; pending_in_step: every row asked for has one pending token, which the
        first step runs (sampling the call's first token) in place of an append."""
        s = self.session
        device = s.engine.device
        shared = decoder.cache is not s.cache
        longest = max(s.processed)
        if shared:
            decoder.cache.copy_prefix_(s.cache, longest)
        step.stop.fill_(-1)
        step.stop[: len(stop)].copy_(torch.tensor(stop, dtype=torch.long, device=device))
        decoder.temperature.fill_(sampling.temperature)
        decoder.top_p.fill_(sampling.top_p)
        noise = step.noise
        generator = None
        if noise is not None:
            generator = s.noise_generator(sampling)
            draw_noise(noise, generator)
        decoder.limit.copy_(torch.tensor(limit_per_row, device=device))
        decoder.start.copy_(torch.tensor(s.processed, device=device))
        selected = decoder.limit > 0
        if pending_in_step:
            pending = [row[0] if row else 0 for row in s.pending]
            decoder.tokens.copy_(torch.tensor(pending, dtype=torch.long, device=device))
            decoder.generated.zero_()
            decoder.active.copy_(selected)
        else:
            first = sample(
                s._last_logits, sampling, noise, temperature=decoder.temperature, top_p=decoder.top_p
            )
            decoder.tokens.copy_(first)
            decoder.out[:, 0] = first
            decoder.generated.copy_(selected.long())
            decoder.active.copy_(selected & ~is_stop(first, step.stop) & (decoder.generated < decoder.limit))
        for done in range(0 if pending_in_step else 1, max(limit_per_row)):
            if noise is not None and done > 0:  # the noise drawn above serves the call's first token
                draw_noise(noise, generator)
            step.run(longest + done + int(pending_in_step))
            if done and done % s.engine.sync_every == 0 and not bool(decoder.active.any()):
                break
        generated = decoder.generated.tolist()
        starts = decoder.start.tolist()
        if shared:
            # Entries past a row's new length are scratch: copying them along is harmless.
            s.cache.copy_span_(decoder.cache, min(s.processed), max(starts))
        outputs = decoder.out[:, : max(generated)].cpu()
        result = []
        for r in rows:
            tokens = outputs[r, : generated[r]].tolist()
            s.processed_tokens += starts[r] - s.processed[r]
            s.processed[r] = starts[r]
            if tokens:  # a row that got no token keeps the one it may have pending
                s.pending[r] = tokens[-1:]
            result.append(tokens)
        return result

    def decoder(self) -> Decoder:
        """The engine's capturing decoder for this batch size when the session decodes in the engine's workspace,
        else the session's own, which decodes in its cache."""
        s = self.session
        if s.decodes_in_workspace:
            return s.engine.workspace(s.batch_size)
        if self._eager is None:
            self._eager = Decoder(s.model, s.cache, compiled=s.engine.options.compile)
        return self._eager

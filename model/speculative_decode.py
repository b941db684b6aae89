"""A session's generate() when its engine speculates: each round drafts for every running row (from the context or
the draft head), runs one verify pass over every running row's pending token and draft (ragged, padded to the
longest), keeps each row's state after its last accepted token, or runs one plain step when no row has a
draft. Drafts are cut to what pays on this machine and text (model.draft_budget). Every emitted token is the one
plain decoding emits (see model.speculative). Where the engine captures its steps, the passes are replayed graphs
over its shared workspace (model.verify_steps), as plain decoding's steps are."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from model.cache import StateTrail
from model.drafting import DRAFT_HEAD_KIND, MAX_NGRAM, Draft
from model.sampling import candidate_count
from model.sampling_params import SamplingParams
from model.speculative import NoiseStream, agreed, cut, targets
from model.verify_steps import VerifySteps

if TYPE_CHECKING:
    from model.session import Session


class SpeculativeDecoding:
    """The generate() of a session whose engine speculates (the session holds it as its decoding; drafting's state
    of each row is the session's RowDrafts), and the state trail its eager verify passes keep."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._trail: StateTrail | None = None
        self._replayed: list[list[int]] | None = None

    def runs_pending_in_step(self, rows: list[int]) -> bool:
        """A round's first pass runs the rows' pending tokens itself, so generate() never appends them first."""
        return False

    @contextmanager
    def replaying(self, texts: list[list[int]]) -> Iterator[None]:
        """Within the block, each row emits the tokens of its text (one list per row) in place of the model's
        choices, from the start of every generate() call, and stops at the text's end; every draft and pass runs
        as it would. Benchmarks replay recorded replies through random weights this way."""
        self._replayed = texts
        try:
            yield
        finally:
            self._replayed = None

    def generate(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        pending_in_step: bool,
    ) -> list[list[int]]:
        """Up to limit_per_row[r] tokens for each of rows (see Session.generate)."""
        replayed = None if self._replayed is None else {r: self._replayed[r] for r in rows}
        return self._speculate(rows, limit_per_row, sampling, stop_ids, replayed)

    def _speculate(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        replayed: dict[int, list[int]] | None,
    ) -> list[list[int]]:
        s = self.session
        engine = s.engine
        if engine.capture is None or s.drafts.head is not None or s.max_tokens > engine.max_context:
            # The draft head's passes run eagerly: its hidden states and cache live in the session.
            return self._rounds(None, rows, limit_per_row, sampling, stop_ids, replayed)
        steps = engine.verify_workspace(s.batch_size)
        with engine.workspace(s.batch_size).lock:
            try:
                steps.capture_all()
            except RuntimeError as error:
                engine.stop_capturing(error)
                return self._rounds(None, rows, limit_per_row, sampling, stop_ids, replayed)
            # As plain decoding does: the session's state in, the passes replayed there, the new positions out.
            first, longest = min(s.processed), max(s.processed)
            steps.cache.copy_prefix_(s.cache, longest)
            try:
                return self._rounds(steps, rows, limit_per_row, sampling, stop_ids, replayed)
            finally:
                s.cache.copy_span_(steps.cache, first, max(s.processed))

    def _rounds(
        self,
        steps: VerifySteps | None,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        replayed: dict[int, list[int]] | None,
    ) -> list[list[int]]:
        """Draft, verify and emit until every row is done, the passes replayed from steps when given (over its
        cache), else run eagerly in the session's cache."""
        s = self.session
        engine = s.engine
        device = engine.device
        noise = None
        if not sampling.greedy:
            candidates = candidate_count(sampling, engine.config.vocab_size)
            noise = NoiseStream(s.noise_generator(sampling), s.batch_size, candidates, device)
        # Device tensors, as plain decoding divides by them: the same rounding.
        temperature = torch.full((1,), sampling.temperature, device=device)
        top_p = torch.full((1,), sampling.top_p, device=device)
        outputs: dict[int, list[int]] = {r: [] for r in rows}
        left = {
            r: limit_per_row[r] if replayed is None else min(limit_per_row[r], len(replayed[r])) for r in rows
        }
        before = {r: s.drafts.texts[r].tokens[-MAX_NGRAM:] for r in rows}
        running = [r for r in rows if left[r] > 0]

        def choose(logits: torch.Tensor) -> list[list[int]]:
            generated = [len(outputs[r]) for r in running]
            if replayed is not None:
                width = logits.shape[1]
                return [
                    (replayed[r] + [-1] * width)[g : g + width]
                    for r, g in zip(running, generated, strict=True)
                ]
            return targets(logits, running, generated, sampling, noise, temperature, top_p)

        def emit(emitted: list[list[int]]) -> None:
            for r, tokens in zip(list(running), emitted, strict=True):
                tokens = cut(tokens, stop_ids, left[r])
                outputs[r] += tokens
                s.drafts.texts[r].extend(tokens)
                s.pending[r] = tokens[-1:]
                left[r] -= len(tokens)
            running[:] = [r for r in running if left[r] > 0 and outputs[r][-1] not in stop_ids]

        emit(choose(s.logits_of(running)[:, None]))
        budget = engine.draft_budget
        while running:
            proposed = self._drafts(running, {r: min(engine.speculate_tokens, left[r] - 1) for r in running})
            drafts = {r: draft.tokens for r, draft in proposed.items()}
            width = 1 + max(len(draft) for draft in drafts.values())
            started = time.perf_counter()
            fed = [
                s.pending[r] + drafts[r] + [0] * (width - 1 - len(drafts[r])) if r in drafts else [0] * width
                for r in range(s.batch_size)
            ]
            active = [r in drafts for r in range(s.batch_size)]
            for r in running:
                s.pending[r] = []
            if width == 1:
                if steps is None:
                    s.step_rows(active, fed)
                else:
                    s.record_step(running, steps.run(fed, s.processed, active)[:, 0])
                s.speculation.steps += 1
                chosen = choose(s.logits_of(running)[:, None])
                if budget is not None:
                    budget.record_pass(s.batch_size, 1, time.perf_counter() - started)
                emit(chosen)
                continue
            if steps is None:
                logits, hidden = self._verify(active, fed, running)
                trail, cache = self._trail, s.cache
            else:
                logits, hidden = steps.run(fed, s.processed, active)[running], None
                trail, cache = steps.trail, steps.cache
            emitted = [
                cut(agreed(drafts[r], row_targets), stop_ids, left[r])
                for r, row_targets in zip(running, choose(logits), strict=True)
            ]
            if budget is not None:  # choose() has read the pass's result: it is done
                budget.record_pass(s.batch_size, width, time.perf_counter() - started)
                for r, tokens in zip(running, emitted, strict=True):
                    budget.record_draft(proposed[r].kind, len(drafts[r]), len(tokens) - 1)
            kept = [len(tokens) - 1 for tokens in emitted]  # the last token fed whose state each row keeps
            trail.keep_(cache, running, kept)
            for i, (r, last) in enumerate(zip(running, kept, strict=True)):
                s.last_logits[r] = logits[i, last]
                s.processed[r] += last + 1
                if hidden is not None:
                    s.drafts.head.add(r, hidden[r, : last + 1])
            s.processed_tokens += sum(kept) + len(kept)
            s.speculation.verify_passes += 1
            s.speculation.drafted += sum(len(draft) for draft in drafts.values())
            s.speculation.accepted += sum(kept)
            emit(emitted)
        if noise is not None:
            noise.rewind(max(len(tokens) for tokens in outputs.values()))
        if engine.drafter is not None:
            for r in rows:
                engine.drafter.finished(outputs[r], before[r])
        return [outputs[r] for r in rows]

    def _drafts(self, running: list[int], limits: dict[int, int]) -> dict[int, Draft]:
        """Up to limits[r] drafted tokens to follow each running row's pending token, as many as the draft budget
        says pay (the head is not run at all when none do: its cache is filled at its next draft)."""
        s = self.session
        budget = s.engine.draft_budget

        def paying(kind: int, available: int) -> int:
            return available if budget is None else budget.length(s.batch_size, kind, available)

        if s.drafts.head is not None:
            limits = {r: paying(DRAFT_HEAD_KIND, limit) for r, limit in limits.items()}
            if not any(limits.values()):
                return {r: Draft([], DRAFT_HEAD_KIND) for r in running}
            drafted = s.drafts.head.draft(s.cache, s.drafts.texts, running, limits)
            return {r: Draft(tokens, DRAFT_HEAD_KIND) for r, tokens in drafted.items()}
        drafts = {r: s.engine.drafter.draft(s.drafts.texts[r], limits[r]) for r in running}
        return {r: Draft(d.tokens[: paying(d.kind, len(d.tokens))], d.kind) for r, d in drafts.items()}

    def _verify(
        self, active: list[bool], fed: list[list[int]], running: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run T tokens in each active row (rows sitting out keep their states; their KV slots from their length
        on are scratch) keeping the GDN states after each token; logits [R, T, V] of the running rows, and the
        final hidden states [B, T, H] when a draft head reads them."""
        s = self.session
        device = s.engine.device
        width = len(fed[0])
        if self._trail is None:
            # The states of every token of the longest pass: about 19 MB a token and row at Qwen3.5-2B's size.
            self._trail = StateTrail(
                s.engine.config,
                s.batch_size,
                s.engine.speculate_tokens + 1,
                device,
                s.engine.dtype,
            )
        out = s.model.verify(
            torch.tensor(fed, dtype=torch.long, device=device),
            torch.tensor(s.processed, dtype=torch.long, device=device),
            s.cache.prefix(max(s.processed) + width),
            # Each position attends as the decode step for it would (the step's bound: the longest row + 1).
            step_bounds=[max(s.processed) + t + 1 for t in range(width)],
            trail=self._trail.resize(width),
            active=None if all(active) else torch.tensor(active, device=device),
            logit_rows=torch.tensor(running, dtype=torch.long, device=device),
            hidden=s.drafts.head is not None,
        )
        return out if s.drafts.head is not None else (out, None)

"""A session's generate() when its engine speculates: each round drafts for every running row (from the context or
the draft head), runs one verify pass over every running row's pending token and draft (ragged, padded to the
longest), keeps each row's state after its last accepted token, or runs one plain step when no row has a
draft. Drafts are cut to what pays on this machine and text (model.draft_budget). Every emitted token is the one
plain decoding emits (see model.speculative). Where the engine captures its steps, the passes are replayed graphs
over its shared workspace (model.verify_steps), as plain decoding's steps are."""

from __future__ import annotations

import time

import torch

from model.cache import StateTrail
from model.drafting import DRAFT_HEAD_KIND, MAX_NGRAM, Draft
from model.sampling import candidate_count
from model.sampling_params import SamplingParams
from model.speculative import NoiseStream, agreed, cut, targets
from model.verify_steps import VerifySteps


class SpeculativeDecoding:
    """Session's speculative generate(), kept apart from plain decoding (Session mixes it in)."""

    def _speculate(
        self,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        forced: dict[int, list[int]] | None,
    ) -> list[list[int]]:
        engine = self.engine
        if engine.capture is None or self._head_rows is not None or self.max_tokens > engine.max_context:
            # The draft head's passes run eagerly: its hidden states and cache live in the session.
            return self._rounds(None, rows, limit_per_row, sampling, stop_ids, forced)
        steps = engine.verify_workspace(self.batch_size)
        with engine.workspace(self.batch_size).lock:
            try:
                steps.capture_all()
            except RuntimeError as error:
                engine.stop_capturing(error)
                return self._rounds(None, rows, limit_per_row, sampling, stop_ids, forced)
            # As plain decoding does: the session's state in, the passes replayed there, the new positions out.
            first, longest = min(self._processed), max(self._processed)
            steps.cache.copy_prefix_(self.cache, longest)
            try:
                return self._rounds(steps, rows, limit_per_row, sampling, stop_ids, forced)
            finally:
                self.cache.copy_span_(steps.cache, first, max(self._processed))

    def _rounds(
        self,
        steps: VerifySteps | None,
        rows: list[int],
        limit_per_row: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        forced: dict[int, list[int]] | None,
    ) -> list[list[int]]:
        """Draft, verify and emit until every row is done, the passes replayed from steps when given (over its
        cache), else run eagerly in the session's cache."""
        engine = self.engine
        device = engine.device
        noise = None
        if not sampling.greedy:
            candidates = candidate_count(sampling, engine.config.vocab_size)
            noise = NoiseStream(self._generator(sampling), self.batch_size, candidates, device)
        # Device tensors, as plain decoding divides by them: the same rounding.
        temperature = torch.full((1,), sampling.temperature, device=device)
        top_p = torch.full((1,), sampling.top_p, device=device)
        outputs: dict[int, list[int]] = {r: [] for r in rows}
        left = {
            r: limit_per_row[r] if forced is None else min(limit_per_row[r], len(forced[r])) for r in rows
        }
        before = {r: self._texts[r].tokens[-MAX_NGRAM:] for r in rows}
        running = [r for r in rows if left[r] > 0]

        def choose(logits: torch.Tensor) -> list[list[int]]:
            generated = [len(outputs[r]) for r in running]
            if forced is not None:
                width = logits.shape[1]
                return [
                    (forced[r] + [-1] * width)[g : g + width] for r, g in zip(running, generated, strict=True)
                ]
            return targets(logits, running, generated, sampling, noise, temperature, top_p)

        def emit(emitted: list[list[int]]) -> None:
            for r, tokens in zip(list(running), emitted, strict=True):
                tokens = cut(tokens, stop_ids, left[r])
                outputs[r] += tokens
                self._texts[r].extend(tokens)
                self._pending[r] = tokens[-1:]
                left[r] -= len(tokens)
            running[:] = [r for r in running if left[r] > 0 and outputs[r][-1] not in stop_ids]

        emit(choose(self._logits_of(running)[:, None]))
        budget = engine.draft_budget
        while running:
            proposed = self._drafts(running, {r: min(engine.speculate_tokens, left[r] - 1) for r in running})
            drafts = {r: draft.tokens for r, draft in proposed.items()}
            width = 1 + max(len(draft) for draft in drafts.values())
            started = time.perf_counter()
            fed = [
                self._pending[r] + drafts[r] + [0] * (width - 1 - len(drafts[r]))
                if r in drafts
                else [0] * width
                for r in range(self.batch_size)
            ]
            active = [r in drafts for r in range(self.batch_size)]
            for r in running:
                self._pending[r] = []
            if width == 1:
                if steps is None:
                    self._step_rows(active, fed)
                else:
                    self._stepped(running, steps.run(fed, self._processed, active)[:, 0])
                self.speculation.steps += 1
                chosen = choose(self._logits_of(running)[:, None])
                if budget is not None:
                    budget.record_pass(self.batch_size, 1, time.perf_counter() - started)
                emit(chosen)
                continue
            if steps is None:
                logits, hidden = self._verify(active, fed, running)
                trail, cache = self._trail, self.cache
            else:
                logits, hidden = steps.run(fed, self._processed, active)[running], None
                trail, cache = steps.trail, steps.cache
            emitted = [
                cut(agreed(drafts[r], row_targets), stop_ids, left[r])
                for r, row_targets in zip(running, choose(logits), strict=True)
            ]
            if budget is not None:  # choose() has read the pass's result: it is done
                budget.record_pass(self.batch_size, width, time.perf_counter() - started)
                for r, tokens in zip(running, emitted, strict=True):
                    budget.record_draft(proposed[r].kind, len(drafts[r]), len(tokens) - 1)
            kept = [len(tokens) - 1 for tokens in emitted]  # the last token fed whose state each row keeps
            trail.keep_(cache, running, kept)
            for i, (r, last) in enumerate(zip(running, kept, strict=True)):
                self._last_logits[r] = logits[i, last]
                self._processed[r] += last + 1
                if hidden is not None:
                    self._head_rows.add(r, hidden[r, : last + 1])
            self.processed_tokens += sum(kept) + len(kept)
            self.speculation.verify_passes += 1
            self.speculation.drafted += sum(len(draft) for draft in drafts.values())
            self.speculation.accepted += sum(kept)
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
        budget = self.engine.draft_budget

        def paying(kind: int, available: int) -> int:
            return available if budget is None else budget.length(self.batch_size, kind, available)

        if self._head_rows is not None:
            limits = {r: paying(DRAFT_HEAD_KIND, limit) for r, limit in limits.items()}
            if not any(limits.values()):
                return {r: Draft([], DRAFT_HEAD_KIND) for r in running}
            drafted = self._head_rows.draft(self.cache, self._texts, running, limits)
            return {r: Draft(tokens, DRAFT_HEAD_KIND) for r, tokens in drafted.items()}
        drafts = {r: self.engine.drafter.draft(self._texts[r], limits[r]) for r in running}
        return {r: Draft(d.tokens[: paying(d.kind, len(d.tokens))], d.kind) for r, d in drafts.items()}

    def _verify(
        self, active: list[bool], fed: list[list[int]], running: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run T tokens in each active row (rows sitting out keep their states; their KV slots from their length
        on are scratch) keeping the GDN states after each token; logits [R, T, V] of the running rows, and the
        final hidden states [B, T, H] when a draft head reads them."""
        device = self.engine.device
        width = len(fed[0])
        if self._trail is None:
            # The states of every token of the longest pass: about 19 MB a token and row at Qwen3.5-2B's size.
            self._trail = StateTrail(
                self.engine.config,
                self.batch_size,
                self.engine.speculate_tokens + 1,
                device,
                self.engine.dtype,
            )
        out = self.model.verify(
            torch.tensor(fed, dtype=torch.long, device=device),
            torch.tensor(self._processed, dtype=torch.long, device=device),
            self.cache.prefix(max(self._processed) + width),
            # Each position attends as the decode step for it would (the step's bound: the longest row + 1).
            step_bounds=[max(self._processed) + t + 1 for t in range(width)],
            trail=self._trail.resize(width),
            active=None if all(active) else torch.tensor(active, device=device),
            logit_rows=torch.tensor(running, dtype=torch.long, device=device),
            hidden=self._head_rows is not None,
        )
        return out if self._head_rows is not None else (out, None)

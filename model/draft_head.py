"""Qwen3.5's multi-token-prediction (MTP) head as a drafter: one full-attention decoder layer that, from the token
at position t + 1 and the trunk's final (normed) hidden state at t, predicts the token at t + 2.

Its tensors (`mtp.*`) come with the checkpoint or with another one of the same shapes (the base Qwen3.5-2B,
whose head a fine-tuned model saved through transformers lacks). Its LM head is the trunk's. The layer keeps
its own KV cache, one more KV entry of the session's cache; see Session for how it is filled.
"""

from __future__ import annotations

import torch

import kernels
from model.cache import kv_prefix
from model.config import Qwen35Config
from model.engine_options import MAX_DRAFT_TOKENS
from model.linear import embedding, linear
from model.qwen35 import Qwen35Model, WeightLayout, decoder_layer_layout, norm_layout

PREFIX = "mtp."
LAYER = PREFIX + "layers.0."
# More than a few steps of the one layer on its own output drift from what it was trained for.
MAX_MTP_DRAFT = 3
# A row's unfilled positions beyond this are filled alone before the batched pass (whose scratch positions past
# each row's must stay within the session's spare KV slots).
MAX_DRAFT_TOKENS_PER_PASS = MAX_DRAFT_TOKENS + 1


def draft_head_layout(config: Qwen35Config) -> dict[str, WeightLayout]:
    """The head's tensors by name, fused as the trunk's are (names as in the checkpoint: `mtp.` first)."""
    fc = PREFIX + "fc.weight"
    layout = {
        fc: WeightLayout(
            (config.hidden_size, 2 * config.hidden_size),
            ((fc, (config.hidden_size, 2 * config.hidden_size)),),
        )
    }
    norms = (f"{PREFIX}{norm}.weight" for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"))
    layout.update(norm_layout(*norms, config=config))
    layout.update(decoder_layer_layout(config, LAYER, "full_attention"))
    return layout


class DraftHead:
    """The MTP layer over the trunk's weights dict (which holds its `mtp.` tensors too)."""

    def __init__(self, trunk: Qwen35Model) -> None:
        if PREFIX + "fc.weight" not in trunk.weights:
            raise ValueError("the model holds no multi-token-prediction head (load it with load_draft_head)")
        self.trunk = trunk

    def forward(
        self,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        start: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        logits_at: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens [B, T] (those at t + 1) and the trunk's normed hidden states [B, T, H] (at t), placed at positions
        start[b] + t of the head's cache kv; returns fp32 logits [B, V] and the head's normed output [B, H] at
        position logits_at[b] of each row (what predicts the token after the next)."""
        trunk = self.trunk
        w = trunk.weights
        eps = trunk.config.rms_norm_eps
        embedded = embedding(tokens, w["embed_tokens.weight"], trunk.dtype)
        joined = torch.cat(
            (
                kernels.rms_norm(embedded, w[PREFIX + "pre_fc_norm_embedding.weight"], eps),
                kernels.rms_norm(hidden, w[PREFIX + "pre_fc_norm_hidden.weight"], eps),
            ),
            dim=-1,
        )
        x = linear(joined, w[PREFIX + "fc.weight"])
        positions = start[:, None] + torch.arange(tokens.shape[1], device=tokens.device)
        normed = kernels.rms_norm(x, w[LAYER + "input_layernorm.weight"], eps)
        attended = trunk.attention(LAYER + "self_attn.", normed, positions, start, kv)
        normed, residual = kernels.rms_norm(
            attended, w[LAYER + "post_attention_layernorm.weight"], eps, residual=x
        )
        out = trunk.mlp(LAYER + "mlp.", normed)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        out, residual = out[rows, logits_at], residual[rows, logits_at]
        final, _ = kernels.rms_norm(out, w[PREFIX + "norm.weight"], eps, residual=residual)
        return linear(final, w["lm_head.weight"]).float(), final


class DraftHeadRows:
    """The draft head's state in one session: per row, how many positions its KV cache holds (filled from the
    trunk's hidden states and the tokens after them), and the trunk's hidden states of the positions since,
    whose pairs are filled at the row's next draft (the token after the last of them is the pending one)."""

    def __init__(self, head: DraftHead, batch: int, max_draft: int, prefill_chunk: int) -> None:
        self.head = head
        self.max_draft = min(max_draft, MAX_MTP_DRAFT)
        self.prefill_chunk = prefill_chunk
        self.filled = [0] * batch
        self.unfilled: list[torch.Tensor | None] = [None] * batch

    def add(self, row: int, hidden: torch.Tensor) -> None:
        """The trunk's hidden states [n, H] of the row's next n positions."""
        held = self.unfilled[row]
        self.unfilled[row] = hidden.clone() if held is None else torch.cat((held, hidden))

    def copy_row(self, row: int, source: DraftHeadRows, source_row: int) -> None:
        self.filled[row] = source.filled[source_row]
        held = source.unfilled[source_row]
        self.unfilled[row] = None if held is None else held.clone()

    def clear(self, row: int) -> None:
        self.filled[row], self.unfilled[row] = 0, None

    def snapshot(self) -> tuple[list[int], list[torch.Tensor | None]]:
        return list(self.filled), [None if h is None else h.clone() for h in self.unfilled]

    def restore(self, snapshot: tuple[list[int], list[torch.Tensor | None]]) -> None:
        filled, unfilled = snapshot
        self.filled, self.unfilled = list(filled), [None if h is None else h.clone() for h in unfilled]

    def draft(self, cache, texts, rows: list[int], limits: dict[int, int]) -> dict[int, list[int]]:
        """Greedy drafts of up to limits[r] (and max_draft) tokens for each of rows, every one of which has a
        pending token: the head first fills its cache up to the row's last position, the pending token's pair
        last, in one batched pass (a long backlog, such as a prompt's, row by row before it), then runs on its
        own output for the further tokens. Positions past a row's filled ones are scratch."""
        kv = cache.kv[-1]
        device = kv[0].device
        batch = kv[0].shape[0]
        backlog = {r: self.unfilled[r].shape[0] for r in rows}
        for r in rows:
            if backlog[r] > MAX_DRAFT_TOKENS_PER_PASS:
                self._catch_up(cache.row(r).kv[-1], texts[r].tokens, r, backlog[r] - 1)
                backlog[r] = 1
        width = max(backlog.values())
        hidden_size = self.head.trunk.config.hidden_size
        tokens = torch.zeros(batch, width, dtype=torch.long, device=device)
        hidden = torch.zeros(batch, width, hidden_size, dtype=self.head.trunk.dtype, device=device)
        last = torch.zeros(batch, dtype=torch.long, device=device)
        for r in rows:
            n, start = backlog[r], self.filled[r]
            tokens[r, :n] = torch.tensor(texts[r].tokens[start + 1 : start + 1 + n], device=device)
            hidden[r, :n] = self.unfilled[r]
            last[r] = n - 1
        starts = torch.tensor(self.filled, dtype=torch.long, device=device)
        # The pass attends over the positions up to the last one it writes (any row's), not the whole cache.
        filled_kv = kv_prefix(kv, min(kv[0].shape[2], max(self.filled) + width))
        for r in rows:
            self.filled[r] += backlog[r]
            self.unfilled[r] = None
        logits, out = self.head.forward(tokens, hidden, starts, filled_kv, last)
        drafts = {r: [] for r in rows}
        steps = max(min(limits[r], self.max_draft) for r in rows)
        for step in range(steps):
            chosen = logits.argmax(-1)
            for r, token in zip(rows, chosen[rows].tolist(), strict=True):
                if len(drafts[r]) < min(limits[r], self.max_draft):
                    drafts[r].append(token)
            if step + 1 < steps:
                # Scratch positions past each row's last: overwritten by its next fill.
                starts = torch.tensor(self.filled, dtype=torch.long, device=device) + step
                zero = torch.zeros(batch, dtype=torch.long, device=device)
                logits, out = self.head.forward(chosen[:, None], out[:, None], starts, kv, zero)
        return drafts

    def _catch_up(self, kv, tokens: list[int], row: int, count: int) -> None:
        """Fill the row's first `count` unfilled positions in chunks, alone."""
        device = kv[0].device
        for offset in range(0, count, self.prefill_chunk):
            n = min(self.prefill_chunk, count - offset)
            start = self.filled[row]
            ids = torch.tensor([tokens[start + 1 : start + 1 + n]], device=device)
            self.head.forward(
                ids,
                self.unfilled[row][offset : offset + n][None],
                torch.tensor([start], device=device),
                kv_prefix(kv, start + n),
                torch.tensor([n - 1], device=device),
            )
            self.filled[row] += n
        self.unfilled[row] = self.unfilled[row][count:]

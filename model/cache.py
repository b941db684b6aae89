"""Static per-sequence state of the Qwen3.5 model: KV caches and Gated DeltaNet conv/recurrent states."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from model.config import Qwen35Config


def kv_prefix(kv: tuple[torch.Tensor, torch.Tensor], tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's (keys, values) viewed up to their first tokens positions, updated in place."""
    keys, values = kv
    return keys[:, :, :tokens], values[:, :, :tokens]


@dataclass
class ModelCache:
    """Preallocated state for B rows of up to max_tokens tokens each.

    kv: per full-attention layer, (keys, values) [B, Hkv, max_tokens, D]; conv: per GDN layer, the last K-1
    conv inputs [B, C, K-1]; recurrent: per GDN layer, the fp32 state [B, Hv, dk, dv].
    """

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    conv: list[torch.Tensor]
    recurrent: list[torch.Tensor]

    @classmethod
    def allocate(
        cls,
        config: Qwen35Config,
        batch: int,
        max_tokens: int,
        device: torch.device,
        dtype: torch.dtype,
        draft_layers: int = 0,
    ) -> ModelCache:
        """draft_layers: full-attention layers of a draft head, whose KV caches follow the trunk's in kv."""
        c = config
        kv_shape = (batch, c.num_key_value_heads, max_tokens, c.head_dim)
        conv_shape = (batch, c.conv_dim, c.linear_conv_kernel_dim - 1)
        state_shape = (batch, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
        attention_layers = c.layer_types.count("full_attention")
        gdn_layers = c.num_hidden_layers - attention_layers
        return cls(
            kv=[
                (
                    torch.zeros(kv_shape, device=device, dtype=dtype),
                    torch.zeros(kv_shape, device=device, dtype=dtype),
                )
                for _ in range(attention_layers + draft_layers)
            ],
            conv=[torch.zeros(conv_shape, device=device, dtype=dtype) for _ in range(gdn_layers)],
            recurrent=[
                torch.zeros(state_shape, device=device, dtype=torch.float32) for _ in range(gdn_layers)
            ],
        )

    @property
    def batch_size(self) -> int:
        return (self.conv or [kv[0] for kv in self.kv])[0].shape[0]

    @property
    def max_tokens(self) -> int:
        return self.kv[0][0].shape[2] if self.kv else 0

    def row(self, index: int) -> ModelCache:
        """A batch-1 view of one row, updated in place by the model."""
        pick = slice(index, index + 1)
        return ModelCache(
            kv=[(k[pick], v[pick]) for k, v in self.kv],
            conv=[s[pick] for s in self.conv],
            recurrent=[s[pick] for s in self.recurrent],
        )

    def tensors(self) -> list[torch.Tensor]:
        return [t for kv in self.kv for t in kv] + self.conv + self.recurrent

    def copy_prefix_(self, source: ModelCache, tokens: int, source_row: int | None = None) -> None:
        """Copy the state of source's rows (or of one source row into every row) for the first tokens positions.

        KV entries past `tokens` are not read before they are written, so they are left as they are.
        """
        self.copy_span_(source, 0, tokens, source_row)

    def copy_span_(self, source: ModelCache, begin: int, end: int, source_row: int | None = None) -> None:
        """Copy source's KV positions [begin, end) and its whole GDN states (of one source row into every row
        when source_row is given); the two caches may differ in max_tokens."""
        pick = slice(None) if source_row is None else slice(source_row, source_row + 1)
        mine = [t[:, :, begin:end] for kv in self.kv for t in kv] + self.conv + self.recurrent
        theirs = [t[pick, :, begin:end] for kv in source.kv for t in kv] + [
            t[pick] for t in source.conv + source.recurrent
        ]
        if source_row is not None:
            theirs = [t.expand_as(m) for t, m in zip(theirs, mine, strict=True)]
        # One call for all of them: on a GPU the whole states go in a few multi-tensor kernels, not one launch each.
        torch._foreach_copy_(mine, theirs)

    def prefix(self, tokens: int) -> ModelCache:
        """A view whose KV caches stop after the first tokens positions (GDN states whole), updated in place."""
        return ModelCache(
            kv=[kv_prefix(kv, tokens) for kv in self.kv], conv=self.conv, recurrent=self.recurrent
        )

    def clone_prefix(self, tokens: int) -> ModelCache:
        """A compact copy holding only the first tokens KV positions (for snapshots)."""
        return ModelCache(
            kv=[(k[:, :, :tokens].clone(), v[:, :, :tokens].clone()) for k, v in self.kv],
            conv=[s.clone() for s in self.conv],
            recurrent=[s.clone() for s in self.recurrent],
        )


class StateTrail:
    """The Gated DeltaNet states after each of the T tokens of a verify pass, per GDN layer: conv [B, T, C, K-1]
    and recurrent [B, T, Hv, dk, dv] (fp32), so that each row keeps those after its last accepted token.

    The storage is allocated once for up to max_tokens tokens and viewed contiguously for each T.
    """

    def __init__(
        self, config: Qwen35Config, batch: int, max_tokens: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        c = config
        self.batch = batch
        self._conv_shape = (c.conv_dim, c.linear_conv_kernel_dim - 1)
        self._state_shape = (c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
        gdn_layers = c.layer_types.count("linear_attention")
        conv_size = batch * max_tokens * c.conv_dim * (c.linear_conv_kernel_dim - 1)
        state_size = (
            batch * max_tokens * c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim
        )
        self._conv = [torch.empty(conv_size, device=device, dtype=dtype) for _ in range(gdn_layers)]
        self._recurrent = [
            torch.empty(state_size, device=device, dtype=torch.float32) for _ in range(gdn_layers)
        ]
        self.conv: list[torch.Tensor] = []
        self.recurrent: list[torch.Tensor] = []
        # The views for each pass width, made once: a verify pass resizes every round.
        self._views: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}

    def resize(self, tokens: int) -> StateTrail:
        """View the storage as trails of `tokens` tokens (at most the max_tokens allocated)."""
        if tokens not in self._views:
            conv_shape, state_shape = (
                (self.batch, tokens, *self._conv_shape),
                (self.batch, tokens, *self._state_shape),
            )
            self._views[tokens] = (
                [flat[: math.prod(conv_shape)].view(conv_shape) for flat in self._conv],
                [flat[: math.prod(state_shape)].view(state_shape) for flat in self._recurrent],
            )
        self.conv, self.recurrent = self._views[tokens]
        return self

    def keep_(self, cache: ModelCache, rows: list[int], kept: list[int]) -> None:
        """Set each of `rows` of cache to its state after token kept[i] of the pass (its other rows as they are). A
        row that kept the pass's last token holds its state already: a pass leaves every state after its last
        token."""
        if not cache.conv:
            return
        last = self.conv[0].shape[1] - 1
        rows, kept = [r for r, t in zip(rows, kept, strict=True) if t != last], [t for t in kept if t != last]
        if not rows:
            return
        device = cache.conv[0].device
        row_index = torch.tensor(rows, dtype=torch.long, device=device)
        token_index = torch.tensor(kept, dtype=torch.long, device=device)
        for state, trail in zip(cache.conv + cache.recurrent, self.conv + self.recurrent, strict=True):
            state.index_copy_(0, row_index, trail[row_index, token_index])

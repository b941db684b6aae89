"""What drafting keeps for each row of a speculating session, moved, emptied and snapshotted with the row."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from model.draft_head import DraftHeadRows
from model.drafting import NgramIndex

if TYPE_CHECKING:
    from model.engine import Engine


class RowDrafts:
    """Each row's tokens, indexed for drafts from the context, and the draft head's rows when the engine has one
    (fed the trunk's hidden states of every position the row runs)."""

    def __init__(self, engine: Engine, batch_size: int) -> None:
        self.texts = [NgramIndex() for _ in range(batch_size)]
        self.head = None
        if engine.draft_head is not None:
            self.head = DraftHeadRows(
                engine.draft_head, batch_size, engine.speculate_tokens, engine.prefill_chunk
            )

    def extend(self, rows: list[list[int]]) -> None:
        """Each row's new tokens (one list per row)."""
        for text, row in zip(self.texts, rows, strict=True):
            text.extend(row)

    def add_hidden(self, row: int, hidden: torch.Tensor) -> None:
        """The trunk's final hidden states [n, H] of the row's next n positions, for the draft head (the session
        hands them over only when there is one)."""
        self.head.add(row, hidden)

    def copy_row(self, row: int, source: RowDrafts, source_row: int) -> None:
        self.texts[row] = source.texts[source_row].copy()
        if self.head is not None:
            self.head.copy_row(row, source.head, source_row)

    def clear(self, row: int) -> None:
        self.texts[row] = NgramIndex()
        if self.head is not None:
            self.head.clear(row)

    def snapshot(self) -> tuple:
        return [text.copy() for text in self.texts], None if self.head is None else self.head.snapshot()

    def restore(self, snapshot: tuple) -> None:
        texts, head = snapshot
        self.texts = [text.copy() for text in texts]
        if head is not None:
            self.head.restore(head)

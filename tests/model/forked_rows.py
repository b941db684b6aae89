"""Rows that continue one sequence, made the way the agent makes them: a RowPool admits a batch-1 session into
several rows (Session.copy_row_), the one fork path the engine has."""

from __future__ import annotations

from model.serving.row_pool import RowPool
from model.session import Session


def forked(parent: Session, rows: int) -> Session:
    """A batch-`rows` session whose rows all continue the batch-1 `parent`, which is left as it was."""
    pool = RowPool(parent.engine, rows)
    pool.admit(parent, rows, parent.max_tokens)
    return pool.session

"""The tasks every server is timed on, and the tables and SQL they use (the same on SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LIST_TABLES = "list tables"
DESCRIBE_TABLE = "describe a table"
SAMPLE_ROWS = "sample rows"
GROUP_BY = "small GROUP BY"
BIG_RESULT = "big result, capped"
TASKS = (LIST_TABLES, DESCRIBE_TABLE, SAMPLE_ROWS, GROUP_BY, BIG_RESULT)

DESCRIBED_TABLE = "orders"
SAMPLED_TABLE = "customers"
SAMPLE_SIZE = 5
SAMPLE_SQL = f"SELECT * FROM {SAMPLED_TABLE} LIMIT {SAMPLE_SIZE}"
GROUP_BY_SQL = "SELECT status, COUNT(*) AS order_count FROM orders GROUP BY status ORDER BY status"
# Every order line with each status change of its order: about 80k rows at demo scale 1, far more than any
# server should hand to a model, so each is capped at ROW_CAP rows by its own means.
BIG_SQL = (
    "SELECT oi.*, h.status, h.changed_at FROM order_items oi "
    "JOIN order_status_history h ON h.order_id = oi.order_id"
)
ROW_CAP = 1000


@dataclass(frozen=True)
class Call:
    """One tool call; `note` says where it departs from the task (e.g. a LIMIT the server cannot add)."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def label(self) -> str:
        return self.tool + (f" ({self.note})" if self.note else "")

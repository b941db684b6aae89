"""The audit log: one JSON line per tool call (who, which source, what was asked, how it ended), never a result
row or a secret; rotated at a size, and a call whose line cannot be written is not answered."""

from __future__ import annotations

import json
import logging
import logging.handlers
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

KEPT_FILES = 5
OUTCOMES = ("ok", "refused", "error", "cancelled")


class AuditLogError(OSError):
    """The audit log could not be written; the call it was for is not answered."""


@dataclass
class AuditRecord:
    """One tool call as the log keeps it."""

    identity: str
    tool: str
    arguments: dict[str, Any]
    source: str | None = None
    outcome: str = "ok"
    rows: int | None = None
    truncated: bool | None = None
    duration_ms: float = 0.0
    queries: list[str] = field(default_factory=list)  # ask_database: the SQL of every query the agent ran
    time: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="milliseconds"))

    def line(self) -> str:
        record = asdict(self)
        if self.tool != "ask_database":
            del record["queries"]
        return json.dumps({"time": record.pop("time"), **record}, ensure_ascii=False, default=str)


class _FailingRotatingHandler(logging.handlers.RotatingFileHandler):
    """The standard library's size-rotating file, with write errors raised instead of printed and ignored."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - the logging API's name
        raise  # called inside the except block of emit(): re-raise what it caught


class AuditLog:
    """Appends records to `path`, one whole line each (the handler's lock makes concurrent calls take turns),
    flushed per line, rotated at `max_mb` with KEPT_FILES older files kept."""

    def __init__(self, path: str | Path, max_mb: float) -> None:
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handler = _FailingRotatingHandler(
                self.path, maxBytes=int(max_mb * 1024 * 1024), backupCount=KEPT_FILES, encoding="utf-8"
            )
        except OSError as error:
            raise AuditLogError(f"cannot open the audit log {self.path}: {error.strerror or error}") from None
        self._handler.setFormatter(logging.Formatter("%(message)s"))

    def write(self, record: AuditRecord) -> None:
        """Append `record`; raise AuditLogError when it cannot be written."""
        entry = logging.LogRecord("sqlscout.audit", logging.INFO, "", 0, record.line(), None, None)
        try:
            self._handler.handle(entry)
        except Exception as error:
            self._drop_stream()
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            raise AuditLogError(f"the audit log {self.path} cannot be written: {reason}") from error

    def _drop_stream(self) -> None:
        """Forget a stream whose write failed, and what it buffered: the next write opens the file again, so a
        line is never half there."""
        stream, self._handler.stream = self._handler.stream, None
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self._handler.close()
        except OSError:
            self._drop_stream()

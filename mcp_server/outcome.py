"""How an episode ends: its final SQL run read-only, falling back to the last query that ran without error."""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass, field

from dbtools.engines import Database
from dbtools.errors import DatabaseToolError
from mcp_server.dialect import MODEL_DIALECT, to_database_dialect
from mcp_server.episode import Episode
from mcp_server.trace import EpisodeTrace


def json_value(value: object) -> object:
    """A cell as JSON can carry it: numbers, strings, booleans and null as they are, others as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.date | datetime.time | datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


@dataclass
class EpisodeOutcome:
    """One episode's answer: its SQL in the database's dialect, the result, and how it ended."""

    ending: str  # submit_sql | answer | forced_answer | fallback | no_sql
    sql: str | None
    sql_sqlite: str | None
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    error: str | None = None
    trace: EpisodeTrace = field(default_factory=EpisodeTrace)
    transcript: str = ""

    def result_key(self) -> frozenset | None:
        """The result as a set of rows (the execution-accuracy convention); None when there is none."""
        if self.sql is None or self.error is not None:
            return None
        return frozenset(tuple(repr(json_value(v)) for v in row) for row in self.rows)


def _run(db: Database, sql_sqlite: str, max_rows: int) -> tuple[str, object | None, str | None]:
    sql = to_database_dialect(sql_sqlite, db.dialect)
    try:
        return sql, db.query(sql, max_rows=max_rows), None
    except DatabaseToolError as exc:
        return sql, None, str(exc)


def conclude(episode: Episode, db: Database, max_rows: int) -> EpisodeOutcome:
    """Run the episode's final SQL; a missing or failing one falls back to its last good query."""
    trace = episode.trace
    trace.final_sql_source = episode.final_sql
    attempts = []
    if episode.final_sql:
        attempts.append((episode.final_sql, episode.ending))
    if episode.last_good_sql and episode.last_good_sql != episode.final_sql:
        attempts.append((episode.last_good_sql, "fallback"))
    first_failure = None
    for sql_sqlite, ending in attempts:
        sql, result, error = _run(db, sql_sqlite, max_rows)
        if error is None:
            return EpisodeOutcome(
                ending=ending,
                sql=sql,
                sql_sqlite=sql_sqlite,
                columns=list(result.columns),
                rows=[tuple(r) for r in result.rows],
                row_count=result.row_count,
                truncated=result.truncated,
                trace=trace,
                transcript=episode.transcript,
            )
        first_failure = first_failure or (sql, sql_sqlite, ending, error)
    if first_failure is not None:
        sql, sql_sqlite, ending, error = first_failure
        return EpisodeOutcome(
            ending, sql, sql_sqlite, error=error, trace=trace, transcript=episode.transcript
        )
    return EpisodeOutcome("no_sql", None, None, trace=trace, transcript=episode.transcript)


def dialect_fields(outcome: EpisodeOutcome, dialect: str) -> dict:
    """sql and sql_dialect, plus the model's SQLite original when the database speaks another dialect."""
    fields = {"sql": outcome.sql, "sql_dialect": dialect}
    if dialect != MODEL_DIALECT:
        fields["sql_sqlite"] = outcome.sql_sqlite
    return fields

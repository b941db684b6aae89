"""How an episode ends: its final SQL run read-only, falling back to the last query that ran without error."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dbtools.engines import Database, QueryResult
from dbtools.errors import DatabaseToolError
from mcp_server.agent.dialect import MODEL_DIALECT
from mcp_server.agent.episode import Episode
from mcp_server.agent.trace import EpisodeTrace


@dataclass
class EpisodeOutcome:
    """One episode's answer: its SQL in the database's dialect, the result, and how it ended."""

    ending: str  # submit_sql | answer | forced_answer | fallback | no_sql
    sql: str | None
    sql_sqlite: str | None
    result: QueryResult | None = None
    error: str | None = None
    trace: EpisodeTrace = field(default_factory=EpisodeTrace)
    transcript: str = ""

    @property
    def columns(self) -> list[str]:
        return list(self.result.columns) if self.result is not None else []

    @property
    def row_count(self) -> int:
        return self.result.row_count if self.result is not None else 0

    @property
    def truncated(self) -> bool:
        """Whether the result holds fewer rows than the query returns."""
        return self.result.truncated if self.result is not None else False

    def result_rows(self) -> list[list]:
        """The result's rows as JSON scalars."""
        return self.result.to_dict()["rows"] if self.result is not None else []

    def result_key(self) -> frozenset | None:
        """The result as a set of rows (the execution-accuracy convention); None when there is none."""
        if self.result is None:
            return None
        return frozenset(tuple(repr(v) for v in row) for row in self.result_rows())


def _run(
    db: Database, episode: Episode, sql_sqlite: str, max_rows: int
) -> tuple[str, QueryResult | None, str | None]:
    sql = episode.translate(sql_sqlite)
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
        started = time.perf_counter()
        sql, result, error = _run(db, episode, sql_sqlite, max_rows)
        trace.final_db_ms += (time.perf_counter() - started) * 1000
        if error is None:
            return EpisodeOutcome(
                ending=ending,
                sql=sql,
                sql_sqlite=sql_sqlite,
                result=result,
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

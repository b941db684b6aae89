"""Build a SQLite database from a SQaLe schema record (CREATE TABLE statements plus row objects), cached."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.eval.datasets.records import json_field

log = logging.getLogger(__name__)


def sqale_database(schema: dict[str, Any], cache_dir: str | Path) -> Path:
    """The SQLite file for a schema record, built on first use into cache_dir and reused afterwards.

    The file name carries a hash of the record's contents, so an edited record never reuses a stale file.
    """
    schema_id = str(schema["schema_id"])
    full_schema = schema.get("full_schema") or ""
    content = json_field(schema, "schema_content", f"schema {schema_id}") or {}
    digest = hashlib.sha256(
        (full_schema + json.dumps(content, sort_keys=True, default=str)).encode()
    ).hexdigest()
    safe_id = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in schema_id)
    path = Path(cache_dir) / f"{safe_id}-{digest[:12]}.sqlite"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, suffix=".partial")
    os.close(handle)
    try:
        conn = sqlite3.connect(partial)
        try:
            _create_tables(conn, full_schema, schema_id)
            _insert_rows(conn, content, schema_id)
            conn.commit()
        finally:
            conn.close()
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path


def _create_tables(conn: sqlite3.Connection, full_schema: str, schema_id: str) -> None:
    """Run the CREATE statements one by one, so one statement SQLite rejects does not lose the others."""
    for statement in _statements(full_schema):
        try:
            conn.execute(statement)
        except sqlite3.Error as error:
            log.warning(
                "schema %s: skipped a statement SQLite rejects (%s): %.120s", schema_id, error, statement
            )


def _statements(script: str) -> list[str]:
    statements, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                statements.append(pending.strip())
            pending = ""
    if pending.strip(" \n\t;"):
        statements.append(pending.strip().rstrip(";"))
    return statements


def _insert_rows(conn: sqlite3.Connection, content: dict[str, list[dict]], schema_id: str) -> None:
    rejected = 0
    for table, rows in content.items():
        for row in rows or []:
            columns = ", ".join(_quote(column) for column in row)
            marks = ", ".join("?" for _ in row)
            try:
                conn.execute(
                    f"INSERT INTO {_quote(table)} ({columns}) VALUES ({marks})",
                    [_cell(value) for value in row.values()],
                )
            except sqlite3.Error as error:
                rejected += 1
                log.debug("schema %s: row of %s rejected: %s", schema_id, table, error)
    if rejected:
        log.warning("schema %s: %d rows rejected by the schema's constraints", schema_id, rejected)


def _quote(identifier: str) -> str:
    return '"' + str(identifier).replace('"', '""') + '"'


def _cell(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value

"""The audit log: one whole JSON line per tool call with who, what and how it ended, never a result row; rotated
at its size; a call whose line cannot be written is not answered; 16 clients at once over HTTP lose no line."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client

from dbtools.engines import open_database
from mcp_server.audit_log import KEPT_FILES, AuditLog, AuditRecord
from mcp_server.call_audit import error_outcome
from mcp_server.model_runner import ModelRunner
from mcp_server.server import build_server
from mcp_server.settings import Settings
from tests.server.conftest import ServerProcess, subprocess_env
from tests.server.scripted_policies import SCRIPT, byte_replay
from tests.server.test_http import client_for

pytestmark = pytest.mark.anyio


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def sqlite_db(sqlite_dsn):
    db = open_database(sqlite_dsn, timeout_s=5.0, max_rows=100)
    yield db
    db.close()


async def test_every_call_is_one_line_saying_who_what_and_how_it_ended(sqlite_db, tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, max_mb=1)
    settings = Settings(max_rows=100)
    runner = ModelRunner(settings, sqlite_db, byte_replay(SCRIPT))
    async with Client(build_server(settings, sqlite_db, runner, audit=audit)) as client:
        await client.call_tool("run_query", {"sql": "SELECT name FROM customers WHERE city = 'London'"})
        await client.call_tool("run_query", {"sql": "DELETE FROM customers"})
        await client.call_tool("run_query", {"sql": "SELECT nope FROM customers"})
        await client.call_tool("search_values", {"text": "new york"})
        await client.call_tool("ask_database", {"question": "How many orders per status?"})
    audit.close()
    ok, refused, failed, values, asked = lines(path)
    assert ok["identity"] == "local" and ok["source"] == "main" and ok["tool"] == "run_query"
    assert ok["arguments"] == {"sql": "SELECT name FROM customers WHERE city = 'London'"}
    assert (ok["outcome"], ok["rows"], ok["truncated"]) == ("ok", 2, False)
    assert ok["time"].endswith("+00:00") and ok["duration_ms"] >= 0
    assert refused["outcome"] == "refused" and refused["rows"] is None
    assert failed["outcome"] == "error"
    assert values["arguments"] == {"text": "new york"} and values["outcome"] == "ok"
    assert asked["tool"] == "ask_database" and asked["outcome"] == "ok"
    assert asked["queries"][0] == "SELECT COUNT(*) FROM orders"
    assert asked["queries"][-1].startswith("SELECT status, COUNT(*) AS n FROM orders GROUP BY status")
    assert "queries" not in ok
    # Never a result row: the rows' values are not in the log.
    text = path.read_text()
    assert "Ada Lovelace" not in text and "Alan Turing" not in text and "Grace Hopper" not in text


async def test_a_call_whose_line_cannot_be_written_is_not_answered(sqlite_db):
    audit = AuditLog("/dev/full", max_mb=1)  # every write fails: no space left on the device
    async with Client(build_server(Settings(), sqlite_db, audit=audit)) as client:
        result = await client.call_tool("run_query", {"sql": "SELECT name FROM customers"})
    audit.close()
    assert result.is_error
    text = result.content[0].text
    assert "audit log /dev/full cannot be written" in text and "not answered" in text
    assert "Ada Lovelace" not in text


def test_the_log_rotates_at_its_size_and_keeps_five_files(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, max_mb=0.001)  # about 1 KB
    for index in range(200):
        audit.write(AuditRecord(identity="local", tool="run_query", arguments={"sql": f"SELECT {index}"}))
    audit.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", *[f"audit.jsonl.{n}" for n in range(1, KEPT_FILES + 1)]]
    for file in tmp_path.iterdir():
        assert all(json.loads(line)["tool"] == "run_query" for line in file.read_text().splitlines())
        assert file.stat().st_size <= 1100
    # The newest record is in the current file.
    assert lines(path)[-1]["arguments"] == {"sql": "SELECT 199"}


@pytest.mark.parametrize(
    "message, outcome",
    [
        ("Refused by the read-only policy:\nonly SELECT", "refused"),
        ("ask_database was cancelled: the client cancelled", "cancelled"),
        ("ask_database stopped: the client left", "cancelled"),
        ("The database rejected the query:\nno such column", "error"),
        ("Error executing tool run_query: Refused by the read-only policy:\nonly SELECT", "refused"),
    ],
)
def test_an_error_is_classified_by_its_first_line(message, outcome):
    assert error_outcome(message) == outcome


# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
@pytest.mark.slow
def test_sixteen_clients_at_once_lose_no_line_and_interleave_none(sqlite_dsn, tmp_path):
    path = tmp_path / "audit.jsonl"
    clients, calls = 16, 10
    server = ServerProcess(
        "--dsn", sqlite_dsn, "--token", "t0ken", "--audit-log", str(path), env=subprocess_env()
    )

    async def one_client(index: int) -> None:
        async with client_for(server, {"Authorization": "Bearer t0ken"}) as client:
            for call in range(calls):
                sql = f"SELECT {index} AS client, {call} AS call, name FROM customers"
                result = await client.call_tool("run_query", {"sql": sql})
                assert not result.is_error, result.content[0].text

    async def all_clients() -> None:
        async with anyio.create_task_group() as group:
            for index in range(clients):
                group.start_soon(one_client, index)

    try:
        anyio.run(all_clients)
    finally:
        server.stop()
    records = lines(path)  # every line is whole JSON
    assert len(records) == clients * calls
    seen = {(r["arguments"]["sql"], r["identity"], r["outcome"]) for r in records}
    assert seen == {
        (f"SELECT {i} AS client, {c} AS call, name FROM customers", "default", "ok")
        for i in range(clients)
        for c in range(calls)
    }

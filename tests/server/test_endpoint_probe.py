"""An endpoint is contacted before the model is called ready: an address where nothing answers fails the first
question at once with the reason, and what the server serves goes to the log."""

from __future__ import annotations

import logging
import time

import pytest

from mcp_server.model_runner import ModelLoadError, ModelRunner
from mcp_server.settings import Settings
from tests.completions_server import CompletionsServer
from tests.server.conftest import free_port


def test_an_endpoint_where_nothing_answers_fails_the_first_question_at_once(sqlite_dsn):
    from dbtools.engines import open_database

    url = f"http://127.0.0.1:{free_port()}/v1"
    db = open_database(sqlite_dsn)
    runner = ModelRunner(Settings(endpoint=url, endpoint_model="m"), db)
    started = time.monotonic()
    try:
        with pytest.raises(
            ModelLoadError, match=r"the model server at .*/v1/models does not answer \(.*\): check"
        ):
            runner.ask("How many orders?")
    finally:
        db.close()
    # Not after the retries of a completion request (1 + 2 + 4 + 8 s of backoff).
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(
    ("served", "logged"),
    [(["m"], "answers and serves m"), (["other"], "serves other, not --endpoint-model m")],
)
def test_what_the_endpoint_serves_is_logged(served, logged, caplog, sqlite_dsn):
    with CompletionsServer([], models=served) as server:
        runner = ModelRunner(Settings(endpoint=f"{server.url}/v1", endpoint_model="m"))
        with caplog.at_level(logging.INFO, logger="mcp_server.model_runner"):
            runner._ensure_policy()
    assert logged in caplog.text and ("model ready" in caplog.text) == (served == ["m"])


def served_status(runner: ModelRunner, db) -> tuple[str, str]:
    """What list_sources and the schema overview say of the model, through the server."""
    import anyio
    from mcp import Client

    from mcp_server.server import build_server
    from mcp_server.tools.schema_overview import OVERVIEW_URI

    async def ask():
        async with Client(build_server(runner.settings, db, runner)) as client:
            listed = await client.call_tool("list_sources", {})
            overview = await client.read_resource(OVERVIEW_URI)
        return listed.structured_content["model"], overview.contents[0].text

    return anyio.run(ask)


def test_list_sources_and_the_overview_say_what_the_endpoint_serves(sqlite_dsn):
    from dbtools.engines import open_database

    db = open_database(sqlite_dsn)
    with CompletionsServer([], models=["m", "n"]) as server:
        runner = ModelRunner(Settings(endpoint=f"{server.url}/v1", endpoint_model="m"), db)
        assert served_status(runner, db)[0] == "not loaded yet"
        runner._ensure_policy()
        listed, overview = served_status(runner, db)
    db.close()
    assert listed == f"ready: the model server at {server.url}/v1 answers and serves m, n"
    # The server's own word, outside the fence that marks database content.
    assert f"ask_database's model: {listed}" in overview.split("BEGIN UNTRUSTED DATA")[0]


def test_list_sources_says_why_the_model_failed(sqlite_dsn):
    from dbtools.engines import open_database

    db = open_database(sqlite_dsn)
    url = f"http://127.0.0.1:{free_port()}/v1"
    runner = ModelRunner(Settings(endpoint=url, endpoint_model="m"), db)
    runner.preload_in_background()
    deadline = time.monotonic() + 10
    while runner.status in ("not loaded yet", f"checking the model server at {url}"):
        assert time.monotonic() < deadline, runner.status
        time.sleep(0.05)
    listed, _ = served_status(runner, db)
    db.close()
    assert listed.startswith(f"not ready: the model server at {url}/models does not answer (")


def test_without_a_model_list_sources_says_how_to_configure_one(sqlite_dsn):
    from dbtools.engines import open_database

    db = open_database(sqlite_dsn)
    listed, _ = served_status(ModelRunner(Settings(), db), db)
    db.close()
    assert listed.startswith("not configured") and "--endpoint URL" in listed

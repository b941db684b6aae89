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
    assert logged in caplog.text and "model ready" in caplog.text

"""An endpoint is contacted before the model is called ready: an address where nothing answers fails the first
question at once with the reason, and what the server serves goes to the log."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mcp_server.model_runner import ModelLoadError, ModelRunner
from mcp_server.settings import Settings
from tests.server.conftest import free_port


def models_server(models: list[str]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            data = json.dumps(
                {"object": "list", "data": [{"id": m, "object": "model"} for m in models]}
            ).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


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
    server = models_server(served)
    try:
        settings = Settings(endpoint=f"http://127.0.0.1:{server.server_port}/v1", endpoint_model="m")
        runner = ModelRunner(settings)
        with caplog.at_level(logging.INFO, logger="mcp_server.model_runner"):
            runner._ensure_policy()
    finally:
        server.shutdown()
    assert logged in caplog.text and "model ready" in caplog.text

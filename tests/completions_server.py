"""A real OpenAI-compatible completions server on loopback that answers with scripted responses."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Script entries besides (status, body): HOLD keeps the request waiting, as a model writing a long answer
# does, until the client hangs up or the server stops; DIE, after the response before it, stops listening,
# so that the next request finds the port closed.
HOLD = "hold"
DIE = "die"


class CompletionsServer:
    """Answers POST /v1/completions with the next scripted response and records every request; a body given as
    a dict is sent as JSON, a string as it is. GET /v1/models lists `models` where given (404 otherwise). `hung_up` counts held requests whose client went away.

    Once the script is used up, `respond(body)` (when given) makes each response, as a model server answers any
    number of prompts; `delay_s` is the time every response takes, as a model writing it; `most_in_flight` is
    the most requests the server held at once."""

    def __init__(
        self,
        responses: list,
        port: int = 0,
        *,
        respond: Callable[[dict], tuple[int, dict | str]] | None = None,
        delay_s: float = 0.0,
        models: list[str] | None = None,
    ) -> None:
        self.responses = list(responses)
        self.respond = respond
        self.delay_s = delay_s
        self.requests: list[dict] = []
        self.hung_up = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if models is None or self.path != "/v1/models":
                    self.send_error(404)
                    return
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]})

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                with outer.lock:
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                try:
                    self._answer()
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

            def _answer(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(
                        {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                    )
                    scripted = bool(outer.responses) or outer.respond is None
                    response = outer.responses.pop(0) if scripted else None
                    dies = bool(outer.responses) and outer.responses[0] == DIE
                    if dies:
                        outer.responses.pop(0)
                if response is None:
                    response = outer.respond(body)
                if outer.delay_s and outer.stopped.wait(outer.delay_s):
                    return
                if response == HOLD:
                    outer._hold(self.connection)
                    self.close_connection = True
                    return
                self._send(*response)
                if dies:
                    self.wfile.flush()
                    outer.stop_listening()

            def _send(self, status: int, payload: dict | str) -> None:
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "text/plain" if isinstance(payload, str) else "application/json"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _hold(self, connection: socket.socket) -> None:
        while not self.stopped.is_set():
            readable, _, _ = select.select([connection], [], [], 0.02)
            if readable and not connection.recv(1, socket.MSG_PEEK):
                with self.lock:
                    self.hung_up += 1
                return

    def wait_for_requests(self, count: int, timeout_s: float = 30.0) -> None:
        """Return once `count` requests have arrived; fail after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count:
            assert time.monotonic() < deadline, (
                f"{len(self.requests)} of {count} requests within {timeout_s} s"
            )
            time.sleep(0.01)

    def stop_listening(self) -> None:
        """Close the port: from now on connecting is refused. Safe from a handler and more than once."""
        if not self.stopped.is_set():
            self.stopped.set()
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            self.server.socket.close()

    def __enter__(self) -> CompletionsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


def completion(
    text: str, prompt_tokens: int, completion_tokens: int, finish: str = "stop"
) -> tuple[int, dict]:
    return 200, {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }

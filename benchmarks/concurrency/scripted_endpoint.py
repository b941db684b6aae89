"""An OpenAI-compatible completions server on loopback that answers each episode's turn with its scripted reply
after a fixed time, as a model server that batches every request it gets and takes that long per reply."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mcp_server.agent.chat_format import START_OF_TURN


class ScriptedEndpoint:
    """Serves POST /v1/completions: `reply_for(prompt, turn)` is the text of the prompt's `turn`-th reply (0 for
    the first), sent after `completion_s` seconds whatever the number of requests in flight."""

    def __init__(self, reply_for: Callable[[str, int], str], completion_s: float) -> None:
        outer = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                started = time.monotonic()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["prompt"]
                turn = prompt.count(f"{START_OF_TURN}assistant") - 1
                text = reply_for(prompt, turn)
                outer.requests += 1
                time.sleep(max(0.0, completion_s - (time.monotonic() - started)))
                reply = {
                    "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": max(1, len(text) // 4)},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

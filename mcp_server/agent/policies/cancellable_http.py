"""An HTTP client whose requests stop the moment a cancel event is set, even while waiting for the reply.

A thread blocked reading a socket is not woken when another thread closes it, only when it shuts it down;
so the client keeps the sockets it opened and shuts them all down on a cancel, in the thread that sets the
cancel event. One client serves one question: its connections are that question's, and nothing else is cut
off with them.
"""

from __future__ import annotations

import socket
import ssl
import threading
import weakref
from contextlib import nullcontext, suppress

import httpx

from model.serving.cancel import CancelEvent, Cancelled

# A server that accepts no connection within this long is down or unreachable; waiting longer only delays
# the retry (and a cancel, which cannot interrupt a connect).
CONNECT_TIMEOUT_S = 10.0


class CancellableClient:
    """httpx.Client for one question's requests; post() gives up at once when its cancel event is set."""

    def __init__(
        self, *, headers: dict[str, str], timeout_s: float, verify: ssl.SSLContext | bool = True
    ) -> None:
        """verify: an SSL context to share (loading the CA certificates costs more than the rest of a client)."""
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
        self._client = httpx.Client(headers=headers, timeout=timeout, verify=verify)
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._cut_off = False

    def post(self, url: str, body: dict, cancel: CancelEvent | None) -> httpx.Response:
        """POST `body` as JSON; raises Cancelled once `cancel` is set, having dropped the connection."""
        with nullcontext() if cancel is None else cancel.when_set(self._cut_off_all):
            if cancel is not None and cancel.is_set():  # set before the callback was registered
                self._cut_off_all()
            try:
                return self._client.post(url, json=body, extensions={"trace": self._trace})
            except httpx.TransportError:
                if cancel is not None and cancel.is_set():
                    raise Cancelled("the question was cancelled while the model was writing") from None
                raise

    def _trace(self, event: str, info: dict) -> None:
        """httpcore's trace hook: keeps every new connection's socket (cut off at once after a cancel)."""
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._sockets.add(sock)
            cut_off = self._cut_off
        if cut_off:
            _shut_down(sock)

    def _cut_off_all(self) -> None:
        with self._lock:
            self._cut_off = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut_down(sock)

    def close(self) -> None:
        self._client.close()


def _shut_down(sock: socket.socket) -> None:
    # A socket that closed meanwhile refuses with OSError: there is nothing left to cut off.
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)

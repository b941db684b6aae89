"""The stdio transport, and what a person who starts the server in a terminal sees: a hint, and a Ctrl-C that works."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from mcp.server.mcpserver import MCPServer

TERMINAL_HINT = (
    "sqlscout is waiting for an MCP client on stdin/stdout (Ctrl-C quits). To try it instead: "
    'python -m mcp_server ask "QUESTION", '
    "python -m mcp_server config claude-desktop|vscode|claude-code, "
    "or the MCP Inspector: npx @modelcontextprotocol/inspector python -m mcp_server"
)
INTERRUPTED_STATUS = 128 + signal.SIGINT


def stdin_is_terminal() -> bool:
    """True when a person typed the command: hosts always give the server a pipe."""
    return sys.stdin is not None and sys.stdin.isatty()


def serve_stdio(server: MCPServer) -> None:
    """Serve MCP over stdin/stdout; in a terminal, say what the server waits for and let Ctrl-C end it."""
    if not stdin_is_terminal():
        server.run("stdio")
        return
    with interrupt_exits_at_once():
        print(TERMINAL_HINT, file=sys.stderr, flush=True)
        server.run("stdio")


@contextmanager
def interrupt_exits_at_once() -> Iterator[None]:
    """While inside, SIGINT ends the process with status 130 without unwinding.

    The SDK reads stdin with a blocking readline on an AnyIO worker thread, shielded from cancellation and
    not a daemon: Ctrl-C cancels the server, but the cancelled task, the event loop's shutdown and the
    interpreter's exit all wait for that readline, which returns only at the next Enter. Nothing needs
    unwinding (the database is only read; caches are written in transactions), so the process ends at once.
    """
    previous = signal.signal(signal.SIGINT, _exit_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _exit_interrupted(signum: int, frame: object) -> None:
    # os.write takes no lock that the interrupted code could hold; the terminal echoed ^C without a line end.
    with suppress(OSError):
        os.write(2, b"\n")
    os._exit(INTERRUPTED_STATUS)

"""The stdio transport: pipes served on the event loop where they can be (stdio_pipes), a client that hangs up
ends it quietly, and a person who starts the server in a terminal sees a hint and gets a Ctrl-C that works."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import anyio
from mcp.server.mcpserver import MCPServer

from mcp_server.stdio_pipes import pipes_usable, serve_on_pipes

log = logging.getLogger(__name__)


def terminal_hint(has_model: bool) -> str:
    """What a person who started the stdio server in a terminal can run instead, with this Python's full path:
    the virtual environment it runs in is rarely active in the shell they run the next command from."""
    python = shlex.quote(sys.executable)
    inspector = f"the MCP Inspector: npx @modelcontextprotocol/inspector {python} -m mcp_server"
    try_it = (
        f'{python} -m mcp_server ask "QUESTION", or {inspector}'
        if has_model
        else f"{inspector} (asking questions in plain language needs --model DIR or --endpoint URL)"
    )
    return (
        "sqlscout is waiting for an MCP client on stdin/stdout (Ctrl-C quits). To connect your assistant: "
        f"{python} -m mcp_server config claude-desktop|vscode|claude-code (then restart the host); to try it: "
        f"{try_it}"
    )


INTERRUPTED_STATUS = 128 + signal.SIGINT
# What writing to the pipes of a client that has gone away raises.
HANG_UP_ERRORS = (BrokenPipeError, ConnectionResetError)


def stdin_is_terminal() -> bool:
    """True when a person typed the command: hosts always give the server a pipe."""
    return sys.stdin is not None and sys.stdin.isatty()


def serve_stdio(server: MCPServer, has_model: bool) -> None:
    """Serve MCP over stdin/stdout until the client closes them; in a terminal, say what the server waits for
    (and what to try, `has_model` or not) and let Ctrl-C end it."""
    with hang_up_ends_serving():
        if pipes_usable():
            anyio.run(serve_on_pipes, server)
            return
        if not stdin_is_terminal():
            server.run("stdio")
            return
        with interrupt_exits_at_once():
            print(terminal_hint(has_model), file=sys.stderr, flush=True)
            server.run("stdio")


@contextmanager
def hang_up_ends_serving() -> Iterator[None]:
    """A client that closes the pipes while a reply is due (say to the question it stopped waiting for) ends
    the session as closing stdin does: the SDK's stdout writer fails with a broken pipe, which reaches here
    inside its task group's exception group."""
    try:
        yield
    except Exception as error:
        if not is_hang_up(error):
            raise
        log.info("the client closed the connection")


def is_hang_up(error: BaseException) -> bool:
    """A broken pipe or reset connection, alone or in exception groups holding nothing else."""
    if isinstance(error, HANG_UP_ERRORS):
        return True
    nested = getattr(error, "exceptions", None)  # an exception group (the backport's, before Python 3.11)
    return bool(nested) and all(is_hang_up(inner) for inner in nested)


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

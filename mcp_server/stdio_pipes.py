"""stdin and stdout served as asyncio pipes: the SDK's stdio transport reads and writes each message through
AnyIO worker threads (three hops a message), these streams read and write on the event loop itself."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

# A message is one line, however long: the reader holds what the client sent, as the SDK's readline does.
MAX_LINE_BYTES = 2**31
# At the end of stdin, how long replies under way may take to go out, and how often that is looked at.
REPLY_GRACE_S = 1.0
REPLY_POLL_S = 0.005
# The SDK's serialisation of a reply (a result or an error) to a request.
_REPLY = re.compile(r'\{"jsonrpc":"2\.0","id":(?:-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)":')


def pipes_usable() -> bool:
    """Whether stdin and stdout are pipes or sockets of their own, which asyncio can serve on its loop.

    Not on Windows; not a regular file or a terminal (a person's Ctrl-C and the terminal's own flags stay the
    SDK's); not a stdout shared with stderr, which the pipe's non-blocking mode would reach too."""
    if sys.platform == "win32":
        return False
    try:
        stdin, stdout, stderr = (os.fstat(fd) for fd in (0, 1, 2))
    except OSError:
        return False
    if not all(stat.S_ISFIFO(s.st_mode) or stat.S_ISSOCK(s.st_mode) for s in (stdin, stdout)):
        return False
    return (stdout.st_dev, stdout.st_ino) != (stderr.st_dev, stderr.st_ino)


@contextmanager
def claimed_std_fds() -> Iterator[tuple[int, int]]:
    """Private duplicates of fds 0 and 1 for the protocol; while inside, fd 0 reads the null device and fd 1
    writes to stderr, so that stray reads and prints (a library's, a child's) never touch the wire."""
    sys.stdout.flush()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        for fd, wire in ((0, wire_in), (1, wire_out)):
            with suppress(OSError):
                os.dup2(wire, fd)
                os.set_blocking(fd, True)  # the loop's duplicates share the pipe's flags
            os.close(wire)


class PipeLines:
    """stdin for the SDK's transport: the lines of a pipe, as text.

    The SDK stops serving at the end of stdin and drops the replies still under way; read on the loop, the end
    of a client's last request arrives before the reply to it (`echo REQUEST | server` printed nothing). So the
    end is passed on once every request read has its reply written, the client has closed stdout, or
    REPLY_GRACE_S has passed (a question still thinking is then cancelled, as before)."""

    def __init__(self, reader: asyncio.StreamReader, writer: PipeWriter) -> None:
        self._reader = reader
        self._writer = writer

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            deadline = time.monotonic() + REPLY_GRACE_S
            while self._writer.replies_due > 0 and not self._writer.closed and time.monotonic() < deadline:
                await asyncio.sleep(REPLY_POLL_S)
            raise StopAsyncIteration
        if _is_request(line):
            self._writer.replies_due += 1
        return line.decode("utf-8", "replace")


class PipeWriter:
    """stdout for the SDK's transport: text written to a pipe, flushed by waiting until the pipe takes it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.replies_due = 0  # requests read whose reply is not written yet

    @property
    def closed(self) -> bool:
        return self._writer.transport.is_closing()

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))
        if _REPLY.match(text):
            self.replies_due -= 1

    async def flush(self) -> None:
        await self._writer.drain()


def _is_request(line: bytes) -> bool:
    """A JSON-RPC request (a method and an id), which the server answers; not a notification or a reply."""
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and "method" in message and "id" in message


async def serve_on_pipes(server: MCPServer) -> None:
    """Serve MCP on stdin/stdout (pipes_usable() must hold) until the client closes stdin."""
    loop = asyncio.get_running_loop()
    with claimed_std_fds() as (wire_in, wire_out):
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        # The loop closes its files with its transports: it gets duplicates, the claim restores from its own.
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(wire_in), "rb", buffering=0)
        )
        write_transport, write_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(os.dup(wire_out), "wb", buffering=0)
        )
        # flush() waits until the pipe has taken everything, as the SDK's blocking write does.
        write_transport.set_write_buffer_limits(high=0)
        writer = PipeWriter(asyncio.StreamWriter(write_transport, write_protocol, None, loop))
        try:
            async with stdio_server(PipeLines(reader, writer), writer) as (read_stream, write_stream):
                lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async serves, too
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
        finally:
            read_transport.close()
            write_transport.close()  # every message was flushed whole: nothing is left to send

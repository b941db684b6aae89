"""The HTTP listening socket: connections accepted on it send each reply at once (no Nagle's algorithm), so a
reply on a kept-alive connection never waits for the client's delayed acknowledgement (about 40 ms)."""

from __future__ import annotations

import asyncio
import socket

from mcp_server.http_transport import listen_socket
from mcp_server.settings import Settings
from tests.server.conftest import free_port


async def _accepted_nodelay(sock: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[int] = loop.create_future()

    class Accept(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    # What uvicorn does with the socket it is given.
    server = await loop.create_server(Accept, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        try:
            return await asyncio.wait_for(accepted, 10)
        finally:
            writer.close()


def test_accepted_connections_send_without_delay():
    sock = listen_socket(Settings(port=free_port()))
    assert sock.proto == socket.IPPROTO_TCP
    assert asyncio.run(_accepted_nodelay(sock)) != 0

"""What the server says of itself is the same in both protocol eras: the 2025 handshake (`initialize`) and the
2026-07-28 `server/discover`."""

from __future__ import annotations

import pytest
from mcp import Client

from dbtools.engines import open_database
from mcp_server.server import build_server
from mcp_server.settings import Settings

pytestmark = pytest.mark.anyio


async def capabilities(server, mode: str):
    async with Client(server, mode=mode) as client:
        return client.protocol_version, client.server_capabilities, client.instructions


async def test_both_eras_advertise_what_the_server_does(sqlite_dsn):
    shop_server = build_server(Settings(), open_database(sqlite_dsn))
    legacy_version, legacy, legacy_instructions = await capabilities(shop_server, "legacy")
    modern_version, modern, modern_instructions = await capabilities(shop_server, "auto")
    assert legacy_version < "2026" <= modern_version  # the two eras were both spoken
    assert modern == legacy and modern_instructions == legacy_instructions
    # No list-change or resource-update notification is ever sent: none is promised.
    assert modern.tools.list_changed is False and modern.resources.list_changed is False
    assert modern.resources.subscribe is False

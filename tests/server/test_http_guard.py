"""Which browser origins the HTTP transport accepts."""

from __future__ import annotations

import pytest

from mcp_server.http_transport import origin_allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # not a browser
        ("http://localhost:6274", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:8080", True),
        ("https://evil.example", False),
        ("http://localhost.evil.example", False),
        ("null", False),
        ("file://", False),
        ("https://app.example.com/", True),  # listed in --allowed-origins
        ("https://APP.example.com", True),
        ("https://app.example.com:8443", False),
    ],
)
def test_origin_allowed(origin, allowed):
    assert origin_allowed(origin, ("https://app.example.com",)) is allowed

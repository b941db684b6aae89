"""A free loopback port for a server that a test or benchmark starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on now (another process could take it before the server does)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

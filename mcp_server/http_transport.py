"""Streamable HTTP transport: the ASGI app behind guards against foreign origins and missing bearer tokens."""

from __future__ import annotations

import hmac
import logging
from urllib.parse import urlsplit

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_server.settings import Settings, is_loopback

log = logging.getLogger(__name__)


def origin_allowed(origin: str | None, extra_origins: tuple[str, ...]) -> bool:
    """No Origin (a non-browser client), a loopback origin, or one listed in `extra_origins`."""
    if origin is None:
        return True
    normalised = origin.strip().rstrip("/").lower()
    if normalised in extra_origins:
        return True
    parts = urlsplit(normalised)
    return parts.scheme in ("http", "https") and parts.hostname is not None and is_loopback(parts.hostname)


class HttpGuard:
    """ASGI middleware in front of the MCP endpoint: Origin check first, then the bearer token."""

    def __init__(self, app: ASGIApp, *, token: str | None, extra_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.expected = token.encode() if token else None
        self.extra_origins = extra_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if not origin_allowed(origin, self.extra_origins):
            log.warning("refused a request from origin %r", origin)
            await PlainTextResponse("Forbidden origin", status_code=403)(scope, receive, send)
            return
        if self.expected is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            # compare_digest: the time taken must not reveal how much of the token matched
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.expected):
                log.warning("refused a request without a valid bearer token")
                response = PlainTextResponse(
                    "Missing or invalid bearer token", status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """The SDK's Host-header check against DNS rebinding on a loopback bind; elsewhere the token protects."""
    if not is_loopback(settings.host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    loopback = ("127.0.0.1", "localhost", "[::1]")
    origins = [
        f"{scheme}://{h}{port}" for scheme in ("http", "https") for h in loopback for port in ("", ":*")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}{port}" for h in loopback for port in ("", ":*")],
        allowed_origins=origins + list(settings.origins),
    )


def http_app(server: MCPServer, settings: Settings) -> ASGIApp:
    """The MCP endpoint at /mcp, wrapped in the Origin and bearer-token guard."""
    app = server.streamable_http_app(
        streamable_http_path="/mcp", host=settings.host, transport_security=transport_security(settings)
    )
    return HttpGuard(app, token=settings.token, extra_origins=settings.origins)


def serve_http(server: MCPServer, settings: Settings) -> None:
    """Serve until interrupted; uvicorn logs through the root logger, to stderr."""
    log.info(
        "listening on http://%s:%d/mcp (%s)",
        settings.host,
        settings.port,
        "bearer token required" if settings.token else "no token: loopback clients only",
    )
    config = uvicorn.Config(
        http_app(server, settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        log_level=settings.log_level.lower(),
    )
    uvicorn.Server(config).run()

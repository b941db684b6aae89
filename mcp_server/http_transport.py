"""Streamable HTTP transport: the ASGI app behind guards against foreign origins and missing bearer tokens."""

from __future__ import annotations

import errno
import logging
import os
import socket
from urllib.parse import urlsplit

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_server.identities import IDENTITY_STATE_KEY, Identities
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


MCP_PATH = "/mcp"
TOKEN_REFUSED = (
    "Missing or invalid bearer token: send the header 'Authorization: Bearer TOKEN' with the server's --token "
    "(SQLSCOUT_TOKEN) or an identity's token from its configuration file"
)


class HttpGuard:
    """ASGI middleware in front of the MCP endpoint: Origin check first, then the bearer token."""

    def __init__(self, app: ASGIApp, *, identities: Identities, extra_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.identities = identities
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
        if scope.get("path", "").rstrip("/") != MCP_PATH:
            # Only the MCP endpoint exists. OAuth discovery (RFC 9728, RFC 8414) and the endpoints clients fall
            # back to without it (/register, /authorize, /token) must not answer 401: that sends clients into an
            # OAuth sign-in instead of showing the bearer-token answer of the MCP endpoint itself.
            await PlainTextResponse(
                f"Not found: this server answers MCP at {MCP_PATH} only; it has no OAuth",
                status_code=404,
            )(scope, receive, send)
            return
        if self.identities.required:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            identity = self.identities.match(given.strip()) if scheme.lower() == "bearer" else None
            if identity is None:
                log.warning(
                    "refused a request %s bearer token", "with a wrong" if given.strip() else "without a"
                )
                # 403 with a JSON-RPC error, not 401: to MCP clients a 401 means "sign in with OAuth", and they
                # start that flow instead of showing this message.
                response = JSONResponse(
                    {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": TOKEN_REFUSED}},
                    status_code=403,
                )
                await response(scope, receive, send)
                return
            # The tools read who called from the scope's state (the audit log records it).
            scope.setdefault("state", {})[IDENTITY_STATE_KEY] = identity
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


def http_app(server: MCPServer, settings: Settings, identities: Identities | None = None) -> ASGIApp:
    """The MCP endpoint at /mcp, wrapped in the Origin and bearer-token guard; `identities` (default: the one
    --token proves, if set) are the tokens accepted."""
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=settings.host, transport_security=transport_security(settings)
    )
    identities = identities or Identities(token=settings.token)
    return HttpGuard(app, identities=identities, extra_origins=settings.origins)


class ListenError(Exception):
    """The HTTP address could not be bound; the message names it and the setting that changes it."""


def listen_socket(settings: Settings) -> socket.socket:
    """A socket listening on --host and --port, bound before anything says the server is up: left to uvicorn,
    a port in use is a logged traceback after the start-up lines and an exit from inside the event loop."""
    host, port = settings.host.strip("[]"), settings.port
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        # Made with its protocol named (IPPROTO_TCP), as asyncio makes its own: asyncio turns Nagle's algorithm
        # off only on connections whose socket says TCP, and with it on, each reply on a kept-alive connection
        # waited about 40 ms for the client's delayed acknowledgement.
        sock = socket.socket(family, kind, proto)
        try:
            if os.name != "nt":  # on Windows the option would let another program take the port
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen()
        except BaseException:
            sock.close()
            raise
        return sock
    except socket.gaierror as error:
        raise ListenError(
            f"cannot resolve --host {settings.host} ({error.strerror}): give an address of this machine"
        ) from None
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            reason = "is already in use by another program: pick a free port"
        elif error.errno == errno.EACCES:
            reason = "needs privileges this process lacks: pick a port above 1023"
        else:
            reason = (
                f"cannot be opened ({error.strerror or error}): check --host (SQLSCOUT_HOST), or pick a port"
            )
        raise ListenError(
            f"port {port} on {settings.host} {reason} with --port PORT (SQLSCOUT_PORT)"
        ) from None


def access_line(token_required: bool) -> str:
    """What the start-up line says is enforced, exactly (without a token the server binds only to loopback)."""
    return "bearer token required" if token_required else "no token: any program on this machine may call it"


def serve_http(
    server: MCPServer, settings: Settings, sock: socket.socket, identities: Identities | None = None
) -> None:
    """Serve on `sock` (from listen_socket) until interrupted; uvicorn logs through the root logger, to stderr."""
    required = (identities or Identities(token=settings.token)).required
    log.info(
        "listening on http://%s:%d%s (%s)", settings.host, settings.port, MCP_PATH, access_line(required)
    )
    config = uvicorn.Config(
        http_app(server, settings, identities),
        host=settings.host,
        port=settings.port,
        log_config=None,
        log_level=settings.log_level.lower(),
    )
    with sock:
        uvicorn.Server(config).run(sockets=[sock])

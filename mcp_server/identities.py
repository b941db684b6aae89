"""Who is calling: each HTTP bearer token an identity with the sources it may use; stdio is the local user."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from contextvars import ContextVar
from dataclasses import dataclass

from mcp.server.mcpserver import Context

from dbtools.access.rules import VisibilityRules

# Over stdio (and over HTTP without a token, loopback only) the caller is whoever runs on this machine.
LOCAL_IDENTITY = "local"
# Whoever holds --token.
TOKEN_IDENTITY = "default"
# Where the HTTP guard leaves the identity a request's token proved, in the ASGI scope's state.
IDENTITY_STATE_KEY = "sqlscout_identity"
TOKEN_BYTES = 32

# The identity of the call being answered, set for the whole call.
current_identity: ContextVar[str] = ContextVar("current_identity", default=LOCAL_IDENTITY)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True)
class IdentitySpec:
    """One identity of the configuration file: its token's sha256, the sources it may use (None: all) and what it
    may not see in them beyond the sources' own rules."""

    name: str
    token_sha256: str
    sources: tuple[str, ...] | None = None
    rules: VisibilityRules = VisibilityRules()


class Identities:
    """The identities a request's bearer token can prove, and what each may use."""

    def __init__(self, specs: tuple[IdentitySpec, ...] = (), token: str | None = None) -> None:
        everything = () if token is None else (IdentitySpec(TOKEN_IDENTITY, token_digest(token)),)
        self._specs = {spec.name: spec for spec in (*everything, *specs)}

    @property
    def required(self) -> bool:
        """Whether HTTP requests must carry a token."""
        return bool(self._specs)

    @property
    def restricted(self) -> bool:
        """Whether some identity may use only some of the sources."""
        return any(spec.sources is not None for spec in self._specs.values())

    def match(self, token: str) -> str | None:
        """The identity whose token this is. Every digest is compared, each in constant time, so the time taken
        says nothing about which identity or how much of a token matched."""
        given = token_digest(token).encode()
        found = None
        for spec in self._specs.values():
            if hmac.compare_digest(given, spec.token_sha256.encode()):
                found = spec.name
        return found

    def rules_of(self, identity: str) -> VisibilityRules | None:
        """The identity's own hidden tables, columns and row filters, if it has any."""
        spec = self._specs.get(identity)
        return spec.rules if spec is not None and spec.rules.active else None

    def allows(self, identity: str, source: str) -> bool:
        spec = self._specs.get(identity)
        return spec is None or spec.sources is None or source in spec.sources


def identity_of(context: Context | None) -> str:
    """The identity the request's transport established: the HTTP guard's, else the local user."""
    try:
        request = context.request_context.request if context is not None else None
    except ValueError:  # no request context: a call from inside the process
        request = None
    scope = getattr(request, "scope", None) or {}
    return scope.get("state", {}).get(IDENTITY_STATE_KEY, LOCAL_IDENTITY)

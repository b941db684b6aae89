"""SSH tunnels to database servers behind a bastion: a loopback port forwarded through asyncssh, rebuilt after a
drop."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

from dbtools.errors import ConnectionFailedError, first_line

log = logging.getLogger(__name__)

DEFAULT_SSH_PORT = 22
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
SSH_CONNECT_TIMEOUT_S = 10.0


class TunnelDownError(ConnectionFailedError):
    """The SSH tunnel a source runs through dropped; the next call rebuilds it."""


@dataclass(frozen=True)
class SshSettings:
    """Where and how to open the tunnel. No key file means the SSH agent and the default keys in ~/.ssh."""

    host: str
    port: int = DEFAULT_SSH_PORT
    user: str | None = None
    key_file: str | None = None
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    jump: str | None = None  # [user@]host[:port], reached first, with the same keys and known_hosts

    @property
    def display_name(self) -> str:
        user = f"{self.user}@" if self.user else ""
        via = f" via {self.jump}" if self.jump else ""
        return f"{user}{self.host}:{self.port}{via}"


def parse_jump(jump: str) -> tuple[str | None, str, int]:
    """Split `[user@]host[:port]`; raise ValueError naming what is wrong."""
    user, _, host_port = jump.rpartition("@")
    host, colon, port_text = host_port.partition(":")
    if not host:
        raise ValueError(f"no host in jump {jump!r}: write [user@]host[:port]")
    if colon and not port_text.isdigit():
        raise ValueError(f"port {port_text!r} in jump {jump!r} is not a number")
    return user or None, host, int(port_text) if colon else DEFAULT_SSH_PORT


class _LoopThread:
    """One event loop on a daemon thread, shared by every tunnel: asyncssh is asynchronous, the engines are not."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coroutine, timeout_s: float):
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="ssh-tunnels", daemon=True).start()
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            future.cancel()
            raise


_LOOP = _LoopThread()


class SshTunnel:
    """A local port on 127.0.0.1 forwarded through SSH to `remote_host:remote_port` as the bastion sees it."""

    def __init__(self, settings: SshSettings, remote_host: str, remote_port: int) -> None:
        self.settings = settings
        self._remote = (remote_host, remote_port)
        self._lock = threading.Lock()
        self._connections: list = []  # the jump host's first, then the bastion's
        # Chosen by the first opening and kept: a reopened tunnel serves the address the engine already knows.
        self._port = 0

    def local_port(self) -> int:
        """The forwarded loopback port, opening the tunnel first if it is closed (or went down)."""
        with self._lock:
            if not self._connections or self.is_down():
                self._close_connections()
                self._port = _LOOP.run(self._open(), SSH_CONNECT_TIMEOUT_S * 2 + 5)
                log.info("SSH tunnel through %s open on 127.0.0.1:%d", self.settings.display_name, self._port)
            return self._port

    def is_down(self) -> bool:
        """Whether a tunnel that was open has lost its SSH connection (the bastion restarted, the network cut)."""
        return any(connection.is_closed() for connection in self._connections)

    def down_error(self, cause: Exception) -> TunnelDownError:
        """The one-line error for the call that met the drop."""
        return TunnelDownError(
            f"the SSH tunnel through {self.settings.display_name} went down ({first_line(cause)}); "
            "the next call opens it again"
        )

    def close(self) -> None:
        """Close the SSH connections; the next local_port() opens them again on the same port."""
        with self._lock:
            self._close_connections()

    def _close_connections(self) -> None:
        for connection in reversed(self._connections):
            connection.close()
        self._connections = []

    async def _open(self) -> int:

        settings = self.settings
        known_hosts = str(Path(settings.known_hosts).expanduser())
        options = {
            "known_hosts": known_hosts,
            "connect_timeout": SSH_CONNECT_TIMEOUT_S,
            "keepalive_interval": 15,
            "keepalive_count_max": 2,
        }
        if settings.key_file:
            options["client_keys"] = [str(Path(settings.key_file).expanduser())]
        connections = []
        try:
            tunnel = None
            if settings.jump:
                jump_user, jump_host, jump_port = parse_jump(settings.jump)
                tunnel = await self._connect(jump_host, jump_port, jump_user, options, None)
                connections.append(tunnel)
            bastion = await self._connect(settings.host, settings.port, settings.user, options, tunnel)
            connections.append(bastion)
            listener = await bastion.forward_local_port("127.0.0.1", self._port, *self._remote)
        except BaseException:
            for connection in reversed(connections):
                connection.close()
            raise
        self._connections = connections
        return listener.get_port()

    async def _connect(self, host: str, port: int, user: str | None, options: dict, tunnel):
        import asyncssh

        where = f"{user + '@' if user else ''}{host}:{port}"
        try:
            return await asyncssh.connect(host, port, username=user, tunnel=tunnel, **options)
        except asyncssh.HostKeyNotVerifiable as error:
            fingerprint = await _host_key_fingerprint(host, port, tunnel)
            raise ConnectionFailedError(
                f"SSH host key of {host}:{port} ({fingerprint}) is not in {options['known_hosts']}: check the "
                f"fingerprint with the server's administrator, then add it (ssh-keyscan -p {port} {host} >> "
                f"{options['known_hosts']})"
            ) from error
        except asyncssh.PermissionDenied as error:
            raise ConnectionFailedError(
                f"SSH login to {where} was refused ({error.reason}): check the user and the key (key_file, or "
                "a key loaded in the SSH agent)"
            ) from error
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as error:
            reason = str(error) or type(error).__name__
            raise ConnectionFailedError(f"cannot open an SSH connection to {where}: {reason}") from error


async def _host_key_fingerprint(host: str, port: int, tunnel) -> str:
    import asyncssh

    try:
        key = await asyncssh.get_server_host_key(host, port, tunnel=tunnel)
    except (OSError, asyncssh.Error):
        return "fingerprint unavailable"
    return key.get_fingerprint("sha256") if key else "no key offered"

"""A configured source's DSN as its engine receives it: the password from the configuration spliced in, and the
server's address replaced by an SSH tunnel's loopback port."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from dbtools.engines.dsn import parse_dsn
from dbtools.errors import ConnectionFailedError

DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306}
SERVER_ENGINES = tuple(DEFAULT_PORTS)


def server_address(dsn: str) -> tuple[str, int]:
    """The host and port a PostgreSQL or MySQL DSN connects to (as a bastion would resolve them)."""
    engine = parse_dsn(dsn).engine
    if engine == "postgres":
        import psycopg.conninfo

        params = psycopg.conninfo.conninfo_to_dict(dsn)
        host = params.get("host") or "localhost"
        if "," in host or host.startswith("/"):
            raise ConnectionFailedError(
                f"an SSH tunnel reaches one host over TCP: {host!r} is a list of hosts or a socket folder"
            )
        return host, int(params.get("port") or DEFAULT_PORTS[engine])
    if engine == "mysql":
        parts = urlsplit(dsn)
        return parts.hostname or "localhost", parts.port or DEFAULT_PORTS[engine]
    raise ConnectionFailedError(f"an SSH tunnel reaches a database server; a {engine} source is a local file")


def engine_dsn(dsn: str, password: str | None, local_port: int | None) -> str:
    """`dsn` with `password` (if given) as its password, and pointed at 127.0.0.1:`local_port` (if given)."""
    if password is None and local_port is None:
        return dsn
    engine = parse_dsn(dsn).engine
    if engine == "postgres":
        import psycopg.conninfo

        overrides: dict[str, object] = {}
        if password is not None:
            overrides["password"] = password
        if local_port is not None:
            # hostaddr would bypass host; the tunnel is the only way in.
            overrides.update(host="127.0.0.1", port=local_port, hostaddr=None)
        params = {**psycopg.conninfo.conninfo_to_dict(dsn), **overrides}
        return psycopg.conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None})
    if engine == "mysql":
        parts = urlsplit(dsn)
        userinfo = parts.netloc.rpartition("@")[0]  # percent-encoded, as the URL has it
        if password is not None:
            userinfo = f"{userinfo.partition(':')[0]}:{quote(password, safe='')}"
        host = "127.0.0.1" if local_port is not None else parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = local_port if local_port is not None else parts.port
        netloc = f"{userinfo}@" if userinfo else ""
        return parts._replace(netloc=f"{netloc}{host}{f':{port}' if port else ''}").geturl()
    raise ConnectionFailedError(
        f"a password or an SSH tunnel applies to a database server, not a {engine} file"
    )

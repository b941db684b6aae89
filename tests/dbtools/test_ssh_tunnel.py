"""Sources behind an SSH bastion: a real OpenSSH server on loopback tunnelling to the suite's PostgreSQL and
MariaDB, its host key checked, a jump host, a drop met by one call and the tunnel rebuilt on the next."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.servers.sshd import SshServer
from dbtools.errors import ConnectionFailedError
from dbtools.sources import ServerLimits, Source, SourceSpec
from dbtools.ssh_tunnel import SshSettings, TunnelDownError
from tests.fixture_schema import mysql_connection

LIMITS = ServerLimits(timeout=10.0, max_rows=1000, pool_size=4, connect_timeout=5)


def bastion(server: SshServer, **changes) -> SshSettings:
    settings = SshSettings(
        host="127.0.0.1",
        port=server.port,
        user=server.user,
        key_file=str(server.client_key),
        known_hosts=str(server.known_hosts),
    )
    return dataclasses.replace(settings, **changes)


def tunnelled(name: str, dsn: str, ssh: SshSettings, password: str | None = None) -> Source:
    return Source(SourceSpec(name, dsn, password=password, ssh=ssh), LIMITS)


def one_value(source: Source, sql: str):
    """The first value of `sql`, read as the program's own SQL: the session probes call functions that queries
    may not."""
    with source.calls() as db:
        return list(db.stream(sql))[0][0]


@pytest.mark.postgres
def test_postgres_through_the_tunnel_drops_once_and_is_rebuilt(running_sshd, postgres_dsn):
    source = tunnelled("sales", postgres_dsn, bastion(running_sshd))
    try:
        assert one_value(source, "SELECT count(*) FROM customers") > 0
        # The client connects to the forwarded loopback port, not to the server's own.
        assert one_value(source, "SELECT inet_client_addr()::text") == "127.0.0.1/32"
        assert "SSH via" in source.database().display_name

        running_sshd.kill()
        with pytest.raises(TunnelDownError) as down:
            one_value(source, "SELECT count(*) FROM customers")
        assert "went down" in str(down.value) and "\n" not in str(down.value)

        # Still down: the next call says so plainly instead of hanging.
        with pytest.raises(ConnectionFailedError, match="cannot open an SSH connection"):
            one_value(source, "SELECT 1")

        running_sshd.start()
        assert one_value(source, "SELECT count(*) FROM customers") > 0
    finally:
        source.close()


@pytest.mark.mysql
def test_mysql_through_a_jump_host_with_a_password(running_sshd, mariadb_server_dsn):
    secret = "s3cret:with@odd/chars"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute("CREATE USER IF NOT EXISTS 'tunnel_reader'@'%%' IDENTIFIED BY %s", (secret,))
        cursor.execute("GRANT SELECT ON mysql.* TO 'tunnel_reader'@'%'")
    address = mariadb_server_dsn.split("@", 1)[1]
    jump = f"{running_sshd.user}@127.0.0.1:{running_sshd.port}"
    source = tunnelled(
        "shop", f"mysql://tunnel_reader@{address}/mysql", bastion(running_sshd, jump=jump), secret
    )
    try:
        assert one_value(source, "SELECT CURRENT_USER()").startswith("tunnel_reader@")
        assert secret not in source.database().display_name
    finally:
        source.close()
    wrong = tunnelled("shop", f"mysql://tunnel_reader@{address}/mysql", bastion(running_sshd), "not-it")
    with pytest.raises(ConnectionFailedError) as refused:
        wrong.database()
    assert "not-it" not in str(refused.value)
    wrong.close()


@pytest.mark.postgres
def test_an_unknown_host_key_names_its_fingerprint_and_the_file(running_sshd, postgres_dsn, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    source = tunnelled("sales", postgres_dsn, bastion(running_sshd, known_hosts=str(empty)))
    with pytest.raises(ConnectionFailedError) as refused:
        source.database()
    message = str(refused.value)
    assert "SHA256:" in message and str(empty) in message and "ssh-keyscan" in message


@pytest.mark.postgres
def test_a_refused_login_names_the_user(running_sshd, postgres_dsn, tmp_path):
    source = tunnelled("sales", postgres_dsn, bastion(running_sshd, user="nobody-here"))
    with pytest.raises(ConnectionFailedError, match="nobody-here@127.0.0.1.*refused"):
        source.database()


def test_a_file_source_cannot_have_a_tunnel(sshd):
    with pytest.raises(ConnectionFailedError, match="local file"):
        tunnelled("music", "sqlite:///music.sqlite", bastion(sshd))

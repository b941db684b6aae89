"""The configuration file: sources, ${VAR} and password_file secrets, SSH settings, [server] settings, and every
mistake refused with the file, the key path and what was expected."""

from __future__ import annotations

import textwrap

import pytest

from mcp_server.config_file import ConfigFileError, load_config

ENV = {"SALES_PASSWORD": "pg-secret-1", "BASTION": "bastion.example.com"}


def write(tmp_path, text: str):
    """The configuration file, beside the database file its error cases name (a.sqlite)."""
    (tmp_path / "a.sqlite").touch()
    path = tmp_path / "sqlscout.toml"
    path.write_text(textwrap.dedent(text))
    return path


def refused(tmp_path, text: str, environ=ENV) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigFileError) as error:
        load_config(path, environ)
    message = str(error.value)
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


def test_a_team_configuration_reads_whole(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "chinook.sqlite").touch()
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "orders.csv").write_text("id,region\n1,EU\n")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "shop").write_text("maria-secret-2\n")
    path = write(
        tmp_path,
        """
        [server]
        max_rows = 500
        log_level = "debug"
        compile = true

        [sources.music]
        dsn = "sqlite:///data/chinook.sqlite"
        description = "the record shop"

        [sources.sales]
        dsn = "postgresql://reader@db.internal:5432/sales"
        password = "${SALES_PASSWORD}"
        timeout = 20
        max_rows = 50
        ssh = { host = "${BASTION}", port = 2222, user = "ops", key_file = "keys/id_ed25519", jump = "ops@outer" }

        [sources.shop]
        dsn = "mysql://reader@maria.internal/shop"
        password_file = "secrets/shop"

        [sources.exports]
        dsn = "exports"
        hidden_tables = ["*_audit"]
        hidden_columns = ["customers.email", "*.password_hash"]
        row_filters = { orders = "region = 'EU'" }
        """,
    )
    config = load_config(path, ENV)
    assert config.settings == {"max_rows": 500, "log_level": "DEBUG", "compile": True}
    music, sales, shop, exports = config.sources
    assert [s.name for s in config.sources] == ["music", "sales", "shop", "exports"]
    # File paths are the config file's folder's, wherever the host starts the server.
    assert music.dsn == f"sqlite:///{tmp_path}/data/chinook.sqlite" and music.description == "the record shop"
    assert exports.dsn == str(tmp_path / "exports")
    assert sales.password == "pg-secret-1" and sales.timeout == 20 and sales.max_rows == 50
    assert sales.ssh.host == "bastion.example.com" and sales.ssh.port == 2222 and sales.ssh.user == "ops"
    assert sales.ssh.key_file == str(tmp_path / "keys" / "id_ed25519") and sales.ssh.jump == "ops@outer"
    assert shop.password == "maria-secret-2"
    assert exports.rules.hidden_tables == ("*_audit",) and exports.rules.row_filters == (
        ("orders", "region = 'EU'"),
    )
    assert exports.rules.hidden_columns == ("customers.email", "*.password_hash") and not music.rules.active
    assert config.secrets == {"pg-secret-1", "maria-secret-2"}
    for spec in config.sources:
        assert "secret" not in repr(spec) and "secret" not in spec.display_name


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            '[identities.ann]\ntoken = "${NOPE}"\n',
            "identities.ann.token: environment variable NOPE is not set (needed by identity 'ann')",
        ),
        (
            '[sources.sales]\ndsn = "postgresql://r@h/s"\nssh = { host = "b", prot = 22 }\n',
            "sources.sales.ssh.prot: unknown key; did you mean 'port'? expected one of host, port, user",
        ),
        (
            '[sources.sales]\ndsn = "postgresql://r@h/s"\nssh = { host = "b", port = "22" }\n',
            "sources.sales.ssh.port: expected a port number, got a string ('22')",
        ),
        (
            '[sources.sales]\ndsn = "postgresql://r@h/s"\nssh = { host = "b", port = 70000 }\n',
            "sources.sales.ssh.port: expected a port number, got an integer (70000)",
        ),
        (
            '[sources.sales]\ndsn = "postgresql://r@h/s"\nssh = { port = 22 }\n',
            "sources.sales.ssh.host: missing",
        ),
        (
            '[sources.sales]\ndsn = "postgresql://r@h/s"\nssh = "bastion"\n',
            "sources.sales.ssh: expected a table",
        ),
        ('[sources.sales]\ndsn = "oracle://x/y"\n', "sources.sales.dsn: unsupported DSN scheme 'oracle'"),
        ("[sources.sales]\ndescription = 'no dsn'\n", "sources.sales.dsn: missing; expected a DSN"),
        ('[sources.Sales]\ndsn = "a.sqlite"\n', "sources.Sales: a source's name is lower-case letters"),
        ('[sources.a]\ndsn = "a.sqlite"\ntimeout = 0\n', "sources.a.timeout: expected a number of seconds"),
        ('[sources.a]\ndsn = "a.sqlite"\ntimeout = nan\n', "sources.a.timeout: expected a number of seconds"),
        ('[sources.a]\ndsn = "a.sqlite"\nmax_rows = true\n', "sources.a.max_rows: expected a number of rows"),
        (
            '[sources.a]\ndsn = "postgresql://r@h/s"\nconnect_timeout = 1\n',
            "sources.a.connect_timeout: expected a number of seconds, at least 2, got an integer (1)",
        ),
        (
            '[sources.a]\ndsn = "a.sqlite"\npassword = "x"\n',
            "sources.a.password: applies to PostgreSQL and MySQL sources, not sqlite",
        ),
        (
            '[sources.a]\ndsn = "mysql://r@h/s"\npassword = "x"\npassword_file = "f"\n',
            "sources.a.password_file: give password or password_file, not both",
        ),
        (
            '[sources.a]\ndsn = "mysql://r@h/s"\npassword_file = "missing"\n',
            "sources.a.password_file: cannot read",
        ),
        (
            '[sources.a]\ndsn = "mysql://r@h/s"\nssh = { host = "b", jump = "u@j:x" }\n',
            "sources.a.ssh.jump: port 'x' in jump 'u@j:x' is not a number",
        ),
        ("[server]\nmax_rowz = 5\n", "server.max_rowz: unknown key; did you mean 'max_rows'?"),
        ("[server]\ndsn = 'a.sqlite'\n", "server.dsn: unknown key"),
        ('[server]\nmax_rows = "many"\n', "server.max_rows: expected an integer, got a string ('many')"),
        (
            '[server]\ntransport = "smoke"\n',
            "server.transport: expected one of stdio, http, got a string ('smoke')",
        ),
        ('[server]\ncompile = "yes"\n', "server.compile: expected true or false, got a string ('yes')"),
        ("[servers]\nport = 1\n", "servers: unknown key; did you mean 'server'?"),
        (
            '[sources.a]\ndsn = "a.sqlite"\nhidden_columns = ["email"]\n',
            "sources.a.hidden_columns[0]: expected table.column",
        ),
        (
            '[sources.a]\ndsn = "a.sqlite"\nhidden_tables = "secrets"\n',
            "sources.a.hidden_tables: expected a list",
        ),
        (
            '[sources.a]\ndsn = "a.sqlite"\ntables = [3]\n',
            "sources.a.tables[0]: expected a pattern, got an integer (3)",
        ),
        (
            '[sources.a]\ndsn = "a.sqlite"\nrow_filters = { orders = "region = = 1" }\n',
            "sources.a.row_filters.orders: not a valid sqlite condition",
        ),
        (
            '[sources.a]\ndsn = "a.sqlite"\nrow_filters = { orders = 1 }\n',
            "sources.a.row_filters.orders: expected an SQL",
        ),
        (
            '[sources.a]\ndsn = "a.sqlite"\n[identities.x]\ntoken_sha256 = "abc"\n',
            "identities.x.token_sha256: expected 64 hex digits",
        ),
        (
            '[identities.x]\ntoken = "t"\ntoken_sha256 = "' + "0" * 64 + '"\n',
            "identities.x: give token_sha256",
        ),
        ("[identities.x]\nsources = []\n", "identities.x: give token_sha256 (or token), exactly one"),
        (
            '[sources.a]\ndsn = "a.sqlite"\n[identities.x]\ntoken = "t"\nsources = ["b"]\n',
            "identities.x.sources[0]: no source 'b'; sources: a",
        ),
        ('[identities.x]\ntoken = "${NO_SUCH_TOKEN}"\n', "needed by identity 'x'"),
        ("sources = 3\n", "sources: expected a table ([sources]), got an integer (3)"),
        ("[sources\n", "not valid TOML"),
    ],
)
def test_a_mistake_names_the_key_and_what_was_expected(tmp_path, text, expected):
    assert expected in refused(tmp_path, text)


def test_a_secret_never_appears_in_an_error(tmp_path):
    message = refused(
        tmp_path,
        '[sources.a]\ndsn = "postgresql://r@h/s"\npassword = "${SALES_PASSWORD}"\ntimeout = "${SALES_PASSWORD}"\n',
    )
    assert "sources.a.timeout" in message and "pg-secret-1" not in message


def test_a_file_source_that_is_not_there_is_a_mistake_of_its_key(tmp_path):
    """As `--dsn` exits at once, so does the file: the message names the key, not a flag that was not given."""
    missing = refused(tmp_path, '[sources.hr]\ndsn = "no_such_exports/"\n')
    assert (
        missing
        == f"sources.hr.dsn: no file or folder at {tmp_path / 'no_such_exports'} (a relative path is read from {tmp_path})"
    )
    (tmp_path / "folder").mkdir()
    folder = refused(tmp_path, '[sources.hr]\ndsn = "sqlite:///folder"\n')
    assert (
        folder.startswith("sources.hr.dsn: ") and "is a folder without CSV, Parquet or JSON files" in folder
    )
    assert "--dsn" not in missing + folder


def test_an_unreadable_file_is_named(tmp_path):
    with pytest.raises(ConfigFileError, match="cannot read the configuration file .*missing.toml"):
        load_config(tmp_path / "missing.toml", ENV)

"""One server for a team's databases, as a host starts it: `--config FILE` naming SQLite, PostgreSQL behind an
SSH bastion, MariaDB with a password file and a CSV folder, every tool on every source, secrets never shown, a
source that is down, a tunnel that drops, and the file reloaded while serving."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from tests.fixture_schema import mysql_connection
from tests.server.conftest import ServerProcess, fenced_body, stdio_client, subprocess_env
from tests.server.test_cli import run_cli

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.mysql, pytest.mark.slow]

PG_SECRET = "pg-Secret-7f3a"  # the throwaway PostgreSQL trusts loopback: the password travels, unchecked
MYSQL_SECRET = "maria-Secret-91c2"
SOURCES = ("music", "sales", "shop", "exports")
# One call of each database tool, as every source's shop schema answers it.
CALLS = [
    ("list_tables", {"pattern": "order*"}),
    ("describe_table", {"table": "orders"}),
    ("search_schema", {"keywords": "customer city"}),
    ("search_values", {"text": "new york"}),
    ("sample_rows", {"table": "products", "limit": 2}),
    ("run_query", {"sql": "SELECT count(*) AS n FROM orders"}),
    ("explain_query", {"sql": "SELECT * FROM orders WHERE id = 3"}),
]


@pytest.fixture(scope="module")
def mysql_reader(mysql_dsn):
    """A MariaDB user that must give its password, with read access to the fixture database."""
    database = mysql_dsn.rsplit("/", 1)[1]
    admin = mysql_dsn.rsplit("/", 1)[0] + "/mysql"
    with mysql_connection(admin) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE USER IF NOT EXISTS 'shop_reader'@'%%' IDENTIFIED BY %s", (MYSQL_SECRET,))
        cursor.execute(f"GRANT SELECT ON `{database}`.* TO 'shop_reader'@'%'")
    address = mysql_dsn.split("@", 1)[1]
    return f"mysql://shop_reader@{address}"


def team_config(tmp_path, sqlite_dsn, postgres_dsn, mysql_reader, csv_dsn, sshd) -> str:
    (tmp_path / "shop.password").write_text(MYSQL_SECRET + "\n")
    path = tmp_path / "team.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [server]
            max_rows = 40

            [sources.music]
            dsn = "{sqlite_dsn}"
            description = "the shop, in SQLite"

            [sources.sales]
            dsn = "{postgres_dsn}"
            password = "${{SALES_PASSWORD}}"
            max_rows = 3
            ssh = {{ host = "127.0.0.1", port = {sshd.port}, user = "{sshd.user}", key_file = "{sshd.client_key}", known_hosts = "{sshd.known_hosts}" }}

            [sources.shop]
            dsn = "{mysql_reader}"
            password_file = "shop.password"

            [sources.exports]
            dsn = "{csv_dsn}"
            """
        )
    )
    return str(path)


async def test_every_tool_on_every_source_of_one_server(
    tmp_path, sqlite_dsn, postgres_dsn, mysql_reader, csv_dsn, running_sshd, cache_dir
):
    config = team_config(tmp_path, sqlite_dsn, postgres_dsn, mysql_reader, csv_dsn, running_sshd)
    seen: list[str] = []
    async with stdio_client(
        "--config",
        config,
        "--log-level",
        "DEBUG",
        SALES_PASSWORD=PG_SECRET,
        SQLSCOUT_CACHE_DIR=str(cache_dir),
    ) as client:
        seen.append(client.instructions)
        tools = {t.name: t for t in (await client.list_tools()).tools}
        listed = await client.call_tool("list_sources", {})
        results = {}
        for source in SOURCES:
            for name, arguments in CALLS:
                result = await client.call_tool(name, {**arguments, "source": source})
                assert not result.is_error, (source, name, result.content[0].text)
                results[source, name] = result
        capped = await client.call_tool(
            "run_query", {"sql": "SELECT id FROM orders", "max_rows": 100, "source": "sales"}
        )
        missing = await client.call_tool("list_tables", {})
        unknown = await client.call_tool("list_tables", {"source": "sale"})
        overview = await client.read_resource("schema://overview")
        seen += [json.dumps(r.structured_content) + r.content[0].text for r in [listed, *results.values()]]
        seen += [missing.content[0].text, unknown.content[0].text, overview.contents[0].text]
    assert "source" in tools["run_query"].input_schema["properties"]
    assert all(name in seen[0] for name in SOURCES)
    summaries = {s["name"]: s for s in listed.structured_content["sources"]}
    assert list(summaries) == list(SOURCES)
    assert [summaries[s]["engine"] for s in SOURCES] == ["sqlite", "postgres", "mysql", "duckdb"]
    assert all(s["reachable"] and s["table_count"] >= 3 for s in summaries.values())
    assert summaries["music"]["description"] == "the shop, in SQLite"
    for source in SOURCES:
        count = results[source, "run_query"].structured_content["rows"][0][0]
        assert count == results["music", "run_query"].structured_content["rows"][0][0]
        assert results[source, "search_values"].structured_content["matches"][0]["values"] == ["New York"]
    # A source's own max_rows caps its results; the [server] one caps the others.
    assert capped.structured_content["row_count"] == 3
    # The caller's own mistakes read as such, outside the fence that database content gets.
    assert missing.is_error and missing.content[0].text.startswith(
        "Error executing tool list_tables: Invalid source"
    )
    assert "give source, one of music, sales, shop, exports" in missing.content[0].text
    assert unknown.is_error and "did you mean 'sales'?" in unknown.content[0].text
    assert "UNTRUSTED" not in missing.content[0].text + unknown.content[0].text
    assert all(f"source {name}" in overview.contents[0].text for name in SOURCES)
    for text in seen:
        assert PG_SECRET not in text and MYSQL_SECRET not in text


def test_secrets_never_reach_stderr_or_the_host_snippet(
    tmp_path, sqlite_dsn, postgres_dsn, mysql_reader, csv_dsn, running_sshd, cache_dir
):
    config = team_config(tmp_path, sqlite_dsn, postgres_dsn, mysql_reader, csv_dsn, running_sshd)
    server = ServerProcess(
        "--config", config, "--log-level", "DEBUG", env=subprocess_env(SALES_PASSWORD=PG_SECRET)
    )
    try:
        import asyncio

        from mcp import Client

        async def calls():
            async with Client(server.url) as client:
                await client.call_tool("list_sources", {})
                for source in SOURCES:
                    await client.call_tool("run_query", {"sql": "SELECT * FROM nowhere", "source": source})

        asyncio.run(calls())
    finally:
        stdout, stderr = server.stop()
    assert "sales" in stderr and "SSH tunnel through" in stderr
    assert PG_SECRET not in stdout + stderr and MYSQL_SECRET not in stdout + stderr
    snippet = run_cli("config", "claude-desktop", "--config", config, SALES_PASSWORD=PG_SECRET)
    assert snippet.returncode == 0, snippet.stderr
    entry = json.loads(snippet.stdout)["mcpServers"]["sqlscout"]
    assert entry["args"][-2:] == ["--config", config]
    assert PG_SECRET not in snippet.stdout + snippet.stderr and MYSQL_SECRET not in snippet.stdout


async def test_a_source_whose_password_variable_is_not_set_is_served_as_unusable(
    tmp_path, sqlite_dsn, cache_dir
):
    """As a host starts it: without the shell's environment. The others are served; this one says why not."""
    config = tmp_path / "team.toml"
    config.write_text(
        f'[sources.music]\ndsn = "{sqlite_dsn}"\n\n'
        '[sources.sales]\ndsn = "postgresql://reader@127.0.0.1:9/sales"\npassword = "${SALES_PASSWORD}"\n'
    )
    snippet = run_cli("config", "claude-desktop", "--config", str(config))
    assert snippet.returncode == 0, snippet.stderr
    assert "reads SALES_PASSWORD from the environment, and a host starts the server without" in snippet.stderr
    async with stdio_client("--config", str(config), SQLSCOUT_CACHE_DIR=str(cache_dir)) as client:
        listed = await client.call_tool("list_sources", {})
        music = await client.call_tool("list_tables", {"source": "music"})
        sales = await client.call_tool("list_tables", {"source": "sales"})
    summaries = {s["name"]: s for s in listed.structured_content["sources"]}
    assert summaries["music"]["reachable"] and not music.is_error
    reason = (
        "sources.sales.password: environment variable SALES_PASSWORD is not set (needed by source 'sales')"
    )
    assert summaries["sales"]["error"].startswith(reason) and str(tmp_path) not in summaries["sales"]["error"]
    assert sales.is_error and reason in sales.content[0].text


async def test_a_source_that_is_down_leaves_the_others_answering(tmp_path, sqlite_dsn, cache_dir):
    config = tmp_path / "down.toml"
    config.write_text(
        f'[sources.music]\ndsn = "{sqlite_dsn}"\n\n'
        '[sources.gone]\ndsn = "postgresql://nobody@127.0.0.1:9/none"\nconnect_timeout = 2\n'
    )
    async with stdio_client("--config", str(config), SQLSCOUT_CACHE_DIR=str(cache_dir)) as client:
        listed = await client.call_tool("list_sources", {})
        music = await client.call_tool("list_tables", {"source": "music"})
        gone = await client.call_tool("list_tables", {"source": "gone"})
    summaries = {s["name"]: s for s in listed.structured_content["sources"]}
    assert summaries["music"]["reachable"] and not summaries["gone"]["reachable"]
    assert summaries["gone"]["table_count"] is None and summaries["gone"]["error"]
    assert not music.is_error
    assert gone.is_error and "The database cannot be reached:" in gone.content[0].text


async def test_a_dropped_tunnel_fails_one_call_and_is_rebuilt(
    tmp_path, postgres_dsn, running_sshd, cache_dir
):
    config = tmp_path / "tunnel.toml"
    ssh = running_sshd
    config.write_text(
        f'[sources.sales]\ndsn = "{postgres_dsn}"\n'
        f'ssh = {{ host = "127.0.0.1", port = {ssh.port}, user = "{ssh.user}", key_file = "{ssh.client_key}", '
        f'known_hosts = "{ssh.known_hosts}" }}\n'
    )
    query = {"sql": "SELECT count(*) FROM orders"}
    async with stdio_client("--config", str(config), SQLSCOUT_CACHE_DIR=str(cache_dir)) as client:
        before = await client.call_tool("run_query", query)  # one source: `source` may be left out
        ssh.kill()
        dropped = await client.call_tool("run_query", query)
        ssh.start()
        after = await client.call_tool("run_query", query)
    assert not before.is_error, before.content[0].text
    assert dropped.is_error and "went down" in dropped.content[0].text
    assert len(fenced_body(dropped.content[0].text).splitlines()) == 1
    assert not after.is_error and after.structured_content["rows"] == before.structured_content["rows"]


async def test_the_file_is_reloaded_while_serving(tmp_path, sqlite_dsn, csv_dsn, cache_dir):
    config = tmp_path / "live.toml"
    config.write_text(f'[sources.music]\ndsn = "{sqlite_dsn}"\n\n[sources.old]\ndsn = "{sqlite_dsn}"\n')
    async with stdio_client("--config", str(config), SQLSCOUT_CACHE_DIR=str(cache_dir)) as client:
        assert not (await client.call_tool("list_tables", {"source": "old"})).is_error
        config.write_text(f'[sources.music]\ndsn = "{sqlite_dsn}"\n\n[sources.exports]\ndsn = "{csv_dsn}"\n')
        added = await _eventually(client, "exports")
        removed = await client.call_tool("list_tables", {"source": "old"})
        config.write_text("[sources.music\n")  # broken: the configuration in use stays
        time.sleep(3)
        kept = await client.call_tool("list_tables", {"source": "exports"})
    assert not added.is_error
    assert removed.is_error and "source 'old' no longer exists" in removed.content[0].text
    assert not kept.is_error


async def _eventually(client, source: str, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        result = await client.call_tool("list_tables", {"source": source})
        if not result.is_error or time.monotonic() > deadline:
            return result
        time.sleep(0.25)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[sources.a]\ndsn = "x.sqlite"\npassword = "${NOT_SET_ANYWHERE}"\n',
            "sources.a.password: applies to PostgreSQL and MySQL sources, not sqlite",
        ),
        ('[identities.ann]\ntoken = "${NOT_SET_ANYWHERE}"\n', "environment variable NOT_SET_ANYWHERE"),
        (
            '[sources.a]\ndsn = "postgresql://r@h/s"\nssh = { host = "b", port = "22" }\n',
            "sources.a.ssh.port",
        ),
        ("[server]\nmax_rows = 0\n", "[server]: --max-rows must be at least 1"),
    ],
)
def test_a_broken_file_stops_the_start_with_exit_2(tmp_path, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = run_cli("--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(config) in done.stderr and message in done.stderr


def test_dsn_and_configured_sources_together_are_refused(tmp_path, sqlite_dsn):
    config = tmp_path / "both.toml"
    config.write_text(f'[sources.a]\ndsn = "{sqlite_dsn}"\n')
    done = run_cli("--config", str(config), "--dsn", sqlite_dsn)
    assert done.returncode == 2 and "give one or the other" in done.stderr

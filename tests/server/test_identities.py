"""Identities over real HTTP: each token sees only its sources (listing, tools, the overview), a wrong or missing
token is refused, the audit log names who called, and `token NAME` makes a token for the file."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from mcp_server.identities import token_digest
from tests.server.conftest import INITIALIZE, MCP_HEADERS, ServerProcess, subprocess_env
from tests.server.test_cli import run_cli
from tests.server.test_http import client_for

# Slow (left out of the fast tier): starts sqlscout servers in subprocesses.
pytestmark = pytest.mark.slow


ANALYST_TOKEN = "analyst-token-5b1d"
ADMIN_TOKEN = "admin-token-c07e"


@pytest.fixture(scope="module")
def team_server(sqlite_dsn, csv_dsn, tmp_path_factory):
    folder = tmp_path_factory.mktemp("identities")
    config = folder / "team.toml"
    config.write_text(
        f'[sources.music]\ndsn = "{sqlite_dsn}"\n\n[sources.exports]\ndsn = "{csv_dsn}"\n\n'
        f'[identities.analyst]\ntoken_sha256 = "{token_digest(ANALYST_TOKEN)}"\nsources = ["music"]\n'
        'hidden_columns = ["customers.city"]\nrow_filters = { customers = "city = \'London\'" }\n\n'
        '[identities.admin]\ntoken = "${ADMIN_TOKEN}"\n'
    )
    audit = folder / "audit.jsonl"
    server = ServerProcess(
        "--config", str(config), "--audit-log", str(audit), env=subprocess_env(ADMIN_TOKEN=ADMIN_TOKEN)
    )
    yield server, audit
    server.stop()


def calls_as(server: ServerProcess, token: str, calls: list[tuple[str, dict]]) -> list:
    async def run() -> list:
        async with client_for(server, {"Authorization": f"Bearer {token}"}) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            overview = await client.read_resource("schema://overview")
            return [*results, overview.contents[0].text]

    return anyio.run(run)


def test_an_identity_sees_only_its_sources(team_server):
    server, audit = team_server
    listed, omitted, other, overview = calls_as(
        server,
        ANALYST_TOKEN,
        [
            ("list_sources", {}),
            ("list_tables", {}),  # its one source: `source` may be left out
            ("list_tables", {"source": "exports"}),
        ],
    )
    assert [s["name"] for s in listed.structured_content["sources"]] == ["music"]
    assert not omitted.is_error
    # Another identity's source is answered as one that does not exist, and is not suggested.
    assert other.is_error and "unknown source 'exports'" in other.content[0].text
    assert "Sources: music" in other.content[0].text
    assert "source music" in overview and "exports" not in overview
    admin_listed, admin_exports, admin_overview = calls_as(
        server, ADMIN_TOKEN, [("list_sources", {}), ("list_tables", {"source": "exports"})]
    )
    assert [s["name"] for s in admin_listed.structured_content["sources"]] == ["music", "exports"]
    assert not admin_exports.is_error and "source exports" in admin_overview
    identities = {json.loads(line)["identity"] for line in audit.read_text().splitlines()}
    assert identities == {"analyst", "admin"}


def test_a_wrong_or_missing_token_is_refused(team_server):
    server, _ = team_server
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": f"Basic {ANALYST_TOKEN}"}):
        response = httpx.post(server.url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=30)
        assert (
            response.status_code == 403
            and "Missing or invalid bearer token" in response.json()["error"]["message"]
        )
    _, stderr = server.process.poll(), "".join(server.stderr_lines)
    assert ANALYST_TOKEN not in stderr and ADMIN_TOKEN not in stderr


def test_token_prints_a_new_token_and_its_line_for_the_file():
    made = run_cli("token", "analyst")
    assert made.returncode == 0, made.stderr
    token, _, declaration, digest_line, _ = made.stdout.split("\n", 4)
    assert len(token) >= 40 and declaration == "[identities.analyst]"
    assert digest_line == f'token_sha256 = "{token_digest(token)}"'
    assert run_cli("token", "analyst").stdout.split("\n")[0] != token
    bad = run_cli("token", "Bad Name")
    assert bad.returncode == 2 and "lower-case letters" in bad.stderr


def test_an_identity_s_own_rules_hide_more_for_it_alone(team_server):
    server, _ = team_server
    query = {"sql": "SELECT * FROM customers ORDER BY id", "source": "music"}
    described, rows, city = calls_as(
        server,
        ANALYST_TOKEN,
        [
            ("describe_table", {"table": "customers"}),
            ("run_query", query),
            ("run_query", {"sql": "SELECT city FROM customers"}),
        ],
    )[:3]
    assert [c["name"] for c in described.structured_content["columns"]] == ["id", "name", "country_code"]
    assert rows.structured_content["columns"] == ["id", "name", "country_code"]
    assert [r[1] for r in rows.structured_content["rows"]] == ["Ada Lovelace", "Alan Turing"]  # London only
    # As for a column that does not exist.
    assert city.is_error and "no such column: city" in city.content[0].text
    admin_rows = calls_as(server, ADMIN_TOKEN, [("run_query", query)])[0]
    assert admin_rows.structured_content["columns"] == ["id", "name", "country_code", "city"]
    assert admin_rows.structured_content["row_count"] == 20

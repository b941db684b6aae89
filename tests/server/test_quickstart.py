"""The README's quickstart as a newcomer runs it: the commands are read from README.md, run in a fresh copy of the
checkout (no .venv), and the host snippet they print starts a server that answers a tools/call from `/` with an
empty environment, as an assistant would start it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from mcp import Client, StdioServerParameters

from tests.server.conftest import PROJECT_ROOT
from tests.server.test_light_install import NOT_SOURCE


def quickstart_commands() -> list[str]:
    """The commands of the README's quickstart section, in order, without their comments."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    lines = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def test_the_quickstart_serves_then_prints_a_host_snippet():
    commands = quickstart_commands()
    assert commands[0] == "bash scripts/serve.sh"
    assert commands[2].startswith(".venv/bin/python -m mcp_server config claude-desktop")


@pytest.fixture(scope="module")
def fresh_checkout(tmp_path_factory):
    checkout = tmp_path_factory.mktemp("quickstart") / "sqlscout"
    shutil.copytree(PROJECT_ROOT, checkout, ignore=NOT_SOURCE)
    return checkout


def run_as_written(command: str, checkout, cache_dir) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=checkout,
        stdin=subprocess.DEVNULL,  # serve.sh's server reads the protocol from stdin: at its end the server stops
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(checkout.parent),
            "SQLSCOUT_CACHE_DIR": cache_dir,
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


# Slow (left out of the fast tier): installs a fresh checkout's .venv.
@pytest.mark.slow
@pytest.mark.anyio
async def test_the_readme_quickstart_reaches_a_tools_call(fresh_checkout, demo_database, run_cache_dir):
    serve, _, config = quickstart_commands()[:3]
    served = run_as_written(serve, fresh_checkout, str(run_cache_dir))
    # The tools alone need no local engine: the first run installs without PyTorch.
    assert "sqlscout[local]" not in served.stderr and "serving" in served.stderr
    torch_check = [fresh_checkout / ".venv/bin/python", "-c", "import torch"]
    assert subprocess.run(torch_check, capture_output=True).returncode == 1, (
        "PyTorch installed for the tools alone"
    )
    snippet = json.loads(run_as_written(config, fresh_checkout, str(run_cache_dir)).stdout)
    host = snippet["mcpServers"]["sqlscout"]
    assert host["command"] == str(fresh_checkout / ".venv/bin/python")
    server = StdioServerParameters(
        command=host["command"],
        args=host["args"],
        env={**host.get("env", {}), "SQLSCOUT_CACHE_DIR": str(run_cache_dir)},
        cwd="/",
    )
    async with Client(server) as client:
        tables = await client.call_tool("list_tables", {})
    assert not tables.is_error, tables.content
    assert "customers" in json.dumps(tables.structured_content)

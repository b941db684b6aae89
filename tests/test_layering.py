"""The packages' imports flow one way (kernels <- model <- mcp_server -> dbtools), the agent knows nothing of
the MCP server around it, and nothing shipped imports the test tree: an installed copy has no tests/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "model", "dbtools", "mcp_server", "benchmarks")
# What each package may import from the others (benchmarks measure everything).
ALLOWED = {
    "kernels": set(),
    "model": {"kernels"},
    "dbtools": set(),
    "mcp_server": {"kernels", "model", "dbtools"},
    "benchmarks": {"kernels", "model", "dbtools", "mcp_server"},
}
# The model modules that the server imports without the local engine installed, and what that engine needs.
TORCH_FREE = (
    "model.errors",
    "model.model_dir",
    "model.engine_options",
    "model.sampling_params",
    "model.serving.cancel",
)
LOCAL_ENGINE_ROOTS = {"torch", "safetensors", "kernels"}


def imported_roots(path: Path) -> set[str]:
    """The top-level names of every module that the file imports, wherever in the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_imports_flow_one_way_and_never_into_tests():
    wrong = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in imported_roots(path):
                root = name.split(".")[0]
                if root == "tests" or (root in PACKAGES and root != package and root not in ALLOWED[package]):
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_agent_imports_nothing_from_the_server_side():
    wrong = []
    for path in sorted((ROOT / "mcp_server" / "agent").rglob("*.py")):
        for name in imported_roots(path):
            if name.startswith("mcp_server") and not name.startswith("mcp_server.agent"):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_serving_layer_imports_only_the_engine():
    wrong = []
    for path in sorted((ROOT / "model" / "serving").rglob("*.py")):
        for name in imported_roots(path):
            if name.split(".")[0] in PACKAGES and name.split(".")[0] != "model":
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_what_the_server_reads_at_start_up_needs_no_torch():
    """Settings check engine options, sampling and the model directory, and every wait shares the cancel event,
    in an install without the local engine too: those modules, and the model modules they import, load no
    torch."""
    wrong = []
    for module in TORCH_FREE:
        path = ROOT / (module.replace(".", "/") + ".py")
        for name in imported_roots(path):
            if name.split(".")[0] in LOCAL_ENGINE_ROOTS or (
                name.startswith("model.") and name not in TORCH_FREE
            ):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


@pytest.mark.parametrize("source", ["from tests.x import y", "import model.engine"])
def test_a_forbidden_import_is_found(tmp_path, source):
    (tmp_path / "module.py").write_text(f"def f():\n    {source}\n")
    assert imported_roots(tmp_path / "module.py") == {source.split()[1]}

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


@pytest.mark.parametrize("source", ["from tests.x import y", "import model.engine"])
def test_a_forbidden_import_is_found(tmp_path, source):
    (tmp_path / "module.py").write_text(f"def f():\n    {source}\n")
    assert imported_roots(tmp_path / "module.py") == {source.split()[1]}

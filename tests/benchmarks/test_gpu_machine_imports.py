"""The GPU machine has torch and triton but none of the server's packages: the benchmarks bring ConfigArgParse
along as a wheel, at the version the pins name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "benchmarks" / "vendor"


def test_benchmarks_import_configargparse_from_the_tree_without_site_packages(tmp_path):
    # -S: no site-packages at all, as on a machine where the package is not installed.
    probe = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import benchmarks, configargparse; print(configargparse.__file__)"
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent.parent == VENDOR


def test_the_vendored_wheel_is_the_pinned_version():
    pinned = re.search(r"^ConfigArgParse==(\S+)$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    assert pinned is not None
    assert [wheel.name for wheel in VENDOR.glob("*.whl")] == [f"configargparse-{pinned[1]}-py3-none-any.whl"]

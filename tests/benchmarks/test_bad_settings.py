"""A benchmark given a bad setting, or run without the machine it needs, stops before measuring anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu_suite import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("module", "variable", "flag"),
    [
        ("benchmarks.gpu_suite", "SQLSCOUT_GPU_SUITE_TEST_TIMEOUT", "--test-timeout"),
        ("benchmarks.mcp_latency", "SQLSCOUT_BENCH_REPEATS", "--repeats"),
        ("benchmarks.value_search", "SQLSCOUT_BENCH_SCALE", "--scale"),
    ],
)
def test_a_bad_environment_value_is_a_usage_error(module, variable, flag):
    done = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env={**os.environ, variable: "lots"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"argument {flag}: invalid" in done.stderr and "'lots'" in done.stderr


def test_the_gpu_suite_without_a_cuda_device_says_what_to_run_instead(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err and not (tmp_path / "out").exists()

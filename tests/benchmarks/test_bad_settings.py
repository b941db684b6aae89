"""A benchmark reads its options from flags over `SQLSCOUT_*` variables; given a bad setting, or run without the
machine it needs, it stops before measuring anything."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu_suite import main
from tests.usage_errors import usage_error

ROOT = Path(__file__).resolve().parents[2]


# Slow (left out of the fast tier): starts each benchmark in a subprocess.
@pytest.mark.slow
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


# module, option, its variable, a value set by the variable and a value set by the flag, as parsed
OPTIONS = [
    ("benchmarks.value_search", "--queries", "SQLSCOUT_BENCH_QUERIES", 20, 30),
    ("benchmarks.mcp_latency", "--warmup", "SQLSCOUT_BENCH_WARMUP", 1, 2),
    ("benchmarks.agent_episode", "--device", "SQLSCOUT_DEVICE", "cuda", "cpu"),
    ("benchmarks.kernels.__main__", "--out", "SQLSCOUT_BENCH_OUT", "runs/a", "runs/b"),
    ("benchmarks.model_cpu", "--repeats", "SQLSCOUT_BENCH_REPEATS", 3, 7),
    ("benchmarks.model_decode", "--shapes", "SQLSCOUT_BENCH_SHAPES", "tiny", "2b"),
    ("benchmarks.gpu_suite", "--bench-budget", "SQLSCOUT_GPU_SUITE_BENCH_BUDGET", 60.0, 30.0),
    ("benchmarks.gpu_suite", "--budget", "SQLSCOUT_GPU_SUITE_BUDGET", 600.0, 300.0),
    ("benchmarks.gpu_ask", "--turn-tokens", "SQLSCOUT_BENCH_TURN_TOKENS", 64, 128),
]
# module, option, its variable: a typed option that refuses "lots"
TYPED = [
    ("benchmarks.value_search", "--scale", "SQLSCOUT_BENCH_SCALE"),
    ("benchmarks.mcp_latency", "--repeats", "SQLSCOUT_BENCH_REPEATS"),
    ("benchmarks.agent_episode", "--device", "SQLSCOUT_DEVICE"),
    ("benchmarks.kernels.__main__", "--ops", "SQLSCOUT_BENCH_OPS"),
    ("benchmarks.model_cpu", "--threads", "SQLSCOUT_BENCH_THREADS"),
    ("benchmarks.model_decode", "--context", "SQLSCOUT_BENCH_CONTEXT"),
    ("benchmarks.gpu_suite", "--model-timeout", "SQLSCOUT_GPU_SUITE_MODEL_TIMEOUT"),
    ("benchmarks.gpu_suite", "--ask-timeout", "SQLSCOUT_GPU_SUITE_ASK_TIMEOUT"),
    ("benchmarks.gpu_ask", "--shapes", "SQLSCOUT_BENCH_SHAPES"),
    ("benchmarks.gpu_suite", "--profile-timeout", "SQLSCOUT_GPU_SUITE_PROFILE_TIMEOUT"),
    ("benchmarks.gpu_profile", "--context", "SQLSCOUT_BENCH_CONTEXT"),
]
SWITCHES = [
    ("benchmarks.value_search", "no_record", "SQLSCOUT_BENCH_NO_RECORD"),
    ("benchmarks.hidden_rules", "no_record", "SQLSCOUT_BENCH_NO_RECORD"),
    ("benchmarks.sources", "no_record", "SQLSCOUT_BENCH_NO_RECORD"),
    ("benchmarks.host_overhead", "no_record", "SQLSCOUT_BENCH_NO_RECORD"),
    ("benchmarks.kernels.__main__", "quick", "SQLSCOUT_BENCH_QUICK"),
    ("benchmarks.kernels.__main__", "combined", "SQLSCOUT_BENCH_COMBINED"),
    ("benchmarks.model_cpu", "no_record", "SQLSCOUT_BENCH_NO_RECORD"),
    ("benchmarks.gpu_suite", "full", "SQLSCOUT_GPU_SUITE_FULL"),
    ("benchmarks.gpu_suite", "skip_tests", "SQLSCOUT_GPU_SUITE_SKIP_TESTS"),
]


@pytest.mark.parametrize(("module", "flag", "variable", "from_variable", "from_flag"), OPTIONS)
def test_a_variable_sets_the_option_and_the_flag_wins(module, flag, variable, from_variable, from_flag):
    parser = importlib.import_module(module).build_parser()
    dest = flag.lstrip("-").replace("-", "_")
    env = {variable: str(from_variable)}
    assert getattr(parser.parse_args([], env_vars=env), dest) == from_variable
    assert getattr(parser.parse_args([flag, str(from_flag)], env_vars=env), dest) == from_flag
    assert f"[env var: {variable}]" in " ".join(parser.format_help().split())


@pytest.mark.parametrize(("module", "dest", "variable"), SWITCHES)
def test_a_switch_is_set_by_its_variable_as_1_and_refuses_other_words(module, dest, variable, capsys):
    parser = importlib.import_module(module).build_parser()
    assert getattr(parser.parse_args([], env_vars={variable: "1"}), dest) is True
    assert getattr(parser.parse_args([], env_vars={variable: "0"}), dest) is False
    assert getattr(parser.parse_args([], env_vars={}), dest) is False
    err = usage_error(lambda: parser.parse_args([], env_vars={variable: "2"}), capsys)
    assert f"Unexpected value for {variable}: '2'" in err


@pytest.mark.parametrize(("module", "flag", "variable"), TYPED)
def test_a_bad_variable_is_a_usage_error_naming_the_option(module, flag, variable, capsys):
    parser = importlib.import_module(module).build_parser()
    err = usage_error(lambda: parser.parse_args([], env_vars={variable: "lots"}), capsys)
    assert f"error: argument {flag}: " in err and "'lots'" in err


def test_a_list_option_reads_its_variable_as_a_list():
    from benchmarks.model_cpu import build_parser

    assert build_parser().parse_args([], env_vars={"SQLSCOUT_BENCH_THREADS": "[1, 4]"}).threads == [1, 4]
    assert build_parser().parse_args([], env_vars={"SQLSCOUT_BENCH_THREADS": "3"}).threads == [3]


def test_the_gpu_suite_without_a_cuda_device_says_what_to_run_instead(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err and not (tmp_path / "out").exists()

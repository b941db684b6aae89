"""The local engine's CPU options of the server: --dtype, --quantize, --threads and --compile, as flags or
variables, checked at start-up and handed to the engine."""

from __future__ import annotations

import pytest

import mcp_server.model_runner as model_runner
from mcp_server.cli import build_parser, main
from mcp_server.host_config import stdio_launch
from mcp_server.model_runner import ModelRunner
from mcp_server.settings import Settings, SettingsError
from model.sampling_params import SamplingParams
from tests.usage_errors import usage_error


def test_the_engine_options_are_read_from_flags_and_variables():
    env = {"SQLSCOUT_DTYPE": "bfloat16", "SQLSCOUT_QUANTIZE": "int8", "SQLSCOUT_THREADS": "4"}
    settings = Settings.resolve(vars(build_parser("serve").parse_args(["--threads", "2"], env_vars=env)))
    assert (settings.dtype, settings.quantize, settings.threads) == ("bfloat16", "int8", 2)
    assert (Settings().dtype, Settings().quantize, Settings().threads) == (None, None, None)


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ([], {}, False),
        (["--compile"], {}, True),
        ([], {"SQLSCOUT_COMPILE": "1"}, True),
        ([], {"SQLSCOUT_COMPILE": "true"}, True),
        (["--no-compile"], {"SQLSCOUT_COMPILE": "1"}, False),
    ],
)
def test_compile_is_a_switch_from_flags_and_variables(flags, env, expected):
    settings = Settings.resolve(vars(build_parser("serve").parse_args(flags, env_vars=env)))
    assert settings.compile is expected


def test_a_host_configuration_keeps_the_compile_switch():
    _, args, _ = stdio_launch(Settings(compile=True, threads=2))
    assert args[:2] == ["-m", "mcp_server"]
    relaunched = Settings.resolve(vars(build_parser("serve").parse_args(args[2:], env_vars={})))
    assert (relaunched.compile, relaunched.threads) == (True, 2)
    assert "--compile" not in stdio_launch(Settings())[1]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SQLSCOUT_DTYPE", "float16", "argument --dtype: invalid choice: 'float16'"),
        ("SQLSCOUT_QUANTIZE", "int3", "argument --quantize: invalid choice: 'int3'"),
        ("SQLSCOUT_THREADS", "0", "--threads must be at least 1, not 0"),
    ],
)
def test_a_bad_engine_option_is_a_usage_error(variable, value, message, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: main(["config", "vscode"]), capsys)


def test_int8_on_a_gpu_is_refused_at_start_up():
    with pytest.raises(SettingsError, match="--quantize runs a model on the CPU only"):
        Settings(quantize="int8", device="cuda")


def test_compiling_on_a_gpu_is_refused_at_start_up():
    with pytest.raises(SettingsError, match="on a GPU the step is a CUDA graph already"):
        Settings(compile=True, device="cuda")


def test_the_runner_hands_the_options_to_the_engine(monkeypatch, tmp_path):
    asked = {}

    def fake_build_policy(**kwargs):
        asked.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(model_runner, "build_policy", fake_build_policy)
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path))
    settings = Settings(endpoint="http://127.0.0.1:9/v1", endpoint_model="m", quantize="int8", threads=3)
    with pytest.raises(model_runner.ModelLoadError):
        ModelRunner(settings, db=None).ask("how many?")
    options = asked["engine_options"]
    assert (options.quantize, options.threads, options.dtype, options.compile) == ("int8", 3, None, False)
    assert options.cache_dir == tmp_path / "engine"


def test_compiling_hands_the_agents_sampling_and_the_cache_directory_to_the_engine(monkeypatch, tmp_path):
    asked = {}

    def fake_build_policy(**kwargs):
        asked.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(model_runner, "build_policy", fake_build_policy)
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path))
    settings = Settings(endpoint="http://127.0.0.1:9/v1", endpoint_model="m", compile=True, temperature=0.3)
    with pytest.raises(model_runner.ModelLoadError):
        ModelRunner(settings, db=None).ask("how many?")
    assert asked["engine_options"].compile
    assert asked["sampling"] == SamplingParams(temperature=0.3, top_p=0.95, top_k=20)
    assert asked["engine_options"].cache_dir == tmp_path / "engine"


def test_speculation_options_reach_the_engine_and_a_missing_draft_head_is_refused_at_start_up(tiny_model_dir):
    env = {"SQLSCOUT_SPECULATE": "off", "SQLSCOUT_SPECULATE_TOKENS": "3"}
    settings = Settings.resolve(vars(build_parser("serve").parse_args([], env_vars=env)))
    options = settings.engine_options()
    assert (options.speculate, options.speculate_tokens) == ("off", 3)
    assert Settings().engine_options().speculate == "auto"
    with pytest.raises(SettingsError, match="--speculate-tokens must be between 1 and 8, not 9"):
        Settings(speculate_tokens=9)
    with pytest.raises(
        SettingsError, match=r"--speculate mtp: .*no multi-token-prediction head.*--draft-head"
    ):
        Settings(model=str(tiny_model_dir), speculate="mtp")
    with pytest.raises(SettingsError, match=r"--draft-head: .*no multi-token-prediction head"):
        Settings(model=str(tiny_model_dir), speculate="mtp", draft_head=str(tiny_model_dir))
    with pytest.raises(SettingsError, match="--draft-head is the head of --speculate mtp"):
        Settings(draft_head=str(tiny_model_dir))

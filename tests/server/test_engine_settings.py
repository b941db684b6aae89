"""The local engine's CPU options of the server: --dtype, --quantize and --threads, as flags or variables,
checked at start-up and handed to the engine."""

from __future__ import annotations

import pytest

import mcp_server.model_runner as model_runner
from mcp_server.cli import build_parser, main
from mcp_server.model_runner import ModelRunner
from mcp_server.settings import Settings, SettingsError
from tests.usage_errors import usage_error


def test_the_engine_options_are_read_from_flags_and_variables():
    env = {"SQLSCOUT_DTYPE": "bfloat16", "SQLSCOUT_QUANTIZE": "int8", "SQLSCOUT_THREADS": "4"}
    settings = Settings.resolve(vars(build_parser("serve").parse_args(["--threads", "2"], env_vars=env)))
    assert (settings.dtype, settings.quantize, settings.threads) == ("bfloat16", "int8", 2)
    assert (Settings().dtype, Settings().quantize, Settings().threads) == (None, None, None)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SQLSCOUT_DTYPE", "float16", "argument --dtype: invalid choice: 'float16'"),
        ("SQLSCOUT_QUANTIZE", "int4", "argument --quantize: invalid choice: 'int4'"),
        ("SQLSCOUT_THREADS", "0", "--threads must be at least 1, not 0"),
    ],
)
def test_a_bad_engine_option_is_a_usage_error(variable, value, message, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: main(["config", "vscode"]), capsys)


def test_int8_on_a_gpu_is_refused_at_start_up():
    with pytest.raises(SettingsError, match="--quantize runs a model on the CPU only"):
        Settings(quantize="int8", device="cuda")


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
    assert (asked["quantize"], asked["threads"], asked["dtype"]) == ("int8", 3, None)
    assert asked["cache_dir"] == tmp_path / "engine"

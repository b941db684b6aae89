"""Settings: flags over environment over defaults, and validation with actionable messages."""

from __future__ import annotations

import pytest

from mcp_server.cli import build_parser, main
from mcp_server.settings import OPTIONS, Settings, SettingsError, is_loopback
from tests.usage_errors import usage_error


def parsed_settings(argv: list[str], env: dict[str, str]) -> Settings:
    """Settings as the server's parser reads them from these flags and these variables only."""
    return Settings.resolve(vars(build_parser("serve").parse_args(argv, env_vars=env)))


def test_flag_wins_over_environment_which_wins_over_default():
    env = {"SQLSCOUT_PORT": "9001", "SQLSCOUT_MAX_ROWS": "50", "SQLSCOUT_LOG_LEVEL": "debug"}
    settings = parsed_settings(["--port", "9002"], env)
    assert settings.port == 9002
    assert settings.max_rows == 50
    assert settings.log_level == "DEBUG"
    assert settings.timeout == Settings().timeout


def test_every_option_has_a_settings_field_and_an_environment_variable():
    fields = set(Settings.__dataclass_fields__)
    assert {o.field for o in OPTIONS} == fields
    assert all(o.env == "SQLSCOUT_" + o.field.upper() for o in OPTIONS)


def test_every_option_is_read_from_its_variable_and_listed_with_it_in_the_help():
    parser = build_parser("serve")
    help_text = " ".join(parser.format_help().split())
    for option in OPTIONS:
        assert f"[env var: {option.env}]" in help_text
    env = {"SQLSCOUT_TRANSPORT": "http", "SQLSCOUT_TOKEN": "t", "SQLSCOUT_HOST": "0.0.0.0"}
    assert parsed_settings([], env).non_defaults() == {"transport": "http", "token": "t", "host": "0.0.0.0"}


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SQLSCOUT_PORT", "eighty", "argument --port: invalid int value: 'eighty'"),
        ("SQLSCOUT_TRANSPORT", "grpc", "argument --transport: invalid choice: 'grpc'"),
        ("SQLSCOUT_LOG_LEVEL", "chatty", "argument --log-level: invalid choice: 'CHATTY'"),
        ("SQLSCOUT_TIMEOUT", "0", "--timeout must be a positive number"),
        ("SQLSCOUT_TIMEOUT", "nan", "--timeout must be a positive number"),
        ("SQLSCOUT_TIMEOUT", "inf", "--timeout must be a positive number"),
        ("SQLSCOUT_CONNECT_TIMEOUT", "1", "--connect-timeout must be at least 2 seconds, not 1"),
        ("SQLSCOUT_POOL_SIZE", "0", "--pool-size must be at least 1, not 0"),
        ("SQLSCOUT_MAX_CONCURRENT_QUESTIONS", "0", "--max-concurrent-questions must be at least 1, not 0"),
        ("SQLSCOUT_MAX_BATCH_ROWS", "0", "--max-batch-rows must be at least 1, not 0"),
    ],
)
def test_a_bad_variable_is_a_usage_error_naming_the_option(variable, value, message, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: main(["config", "vscode"]), capsys)


def test_model_and_endpoint_rules(tmp_path, monkeypatch):
    # A model directory beside an endpoint lends the endpoint its tokenizer, chat template and prompts.
    both = Settings(model=str(tmp_path), endpoint="http://localhost:8001/v1", endpoint_model="m")
    assert both.has_model
    with pytest.raises(SettingsError, match="--endpoint needs --endpoint-model"):
        Settings(endpoint="http://localhost:8001/v1")
    with pytest.raises(SettingsError, match="only apply with --endpoint"):
        Settings(api_key="secret")
    with pytest.raises(SettingsError, match="does not exist: give the directory"):
        Settings(model=str(tmp_path / "missing"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SettingsError, match="config.json is a file: give the directory that holds it"):
        Settings(model=str(tmp_path / "config.json"))
    assert Settings(model=str(tmp_path)).has_model
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings(model="~").model == str(tmp_path)
    assert not Settings().has_model


@pytest.mark.parametrize(
    "url", ["127.0.0.1:9", "localhost:8001/v1", "ftp://host/v1", "http:///v1", "http://h:port/v1"]
)
def test_an_endpoint_that_is_no_http_url_is_refused_at_start(url):
    """Accepted, it would fail only at the first question, after its retries."""
    with pytest.raises(SettingsError, match=r"--endpoint \(SQLSCOUT_ENDPOINT\)"):
        Settings(endpoint=url, endpoint_model="m")
    assert Settings(endpoint="https://models.example:8443/v1", endpoint_model="m").endpoint


def test_an_endpoint_with_credentials_in_its_url_is_refused_for_api_key():
    """The URL is shown in logs, errors and list_sources."""
    with pytest.raises(SettingsError, match=r"carries credentials .*--api-key") as refused:
        Settings(endpoint="https://me:s3cret@models.example/v1", endpoint_model="m")
    assert "s3cret" not in str(refused.value)


def test_a_folder_without_config_json_is_not_taken_for_a_model(tmp_path):
    with pytest.raises(SettingsError) as refused:
        Settings(model=str(tmp_path))
    message = str(refused.value)
    assert f"--model {tmp_path} has no config.json, so it is not a model directory" in message
    assert "config.json, tokenizer and safetensors weights" in message
    assert "`hf download trl-lab/qwen3.5-2b-grpo-sqale --local-dir DIR`" in message
    # With an endpoint the folder only lends its tokenizer and prompts: the weights run elsewhere.
    assert Settings(model=str(tmp_path), endpoint="http://localhost:8001/v1", endpoint_model="m").model


@pytest.mark.parametrize("absent", ["torch", "safetensors"])
def test_a_local_model_without_the_local_engine_says_how_to_install_it(tmp_path, monkeypatch, absent):
    import model.errors

    (tmp_path / "config.json").write_text("{}")
    real_find_spec = model.errors.importlib.util.find_spec
    monkeypatch.setattr(
        model.errors.importlib.util,
        "find_spec",
        lambda name, *args: None if name == absent else real_find_spec(name, *args),
    )
    with pytest.raises(SettingsError) as refused:
        Settings(model=str(tmp_path))
    assert str(refused.value) == (
        f"--model: the local engine needs {absent}, which this Python lacks: install it in the sqlscout checkout "
        "with `pip install -c constraints.txt '.[local]'` (`bash scripts/serve.sh --model DIR` installs it into .venv); or run "
        "the model on a server and give --endpoint URL"
    )
    assert Settings(model=str(tmp_path), endpoint="http://localhost:8001/v1", endpoint_model="m").model


def test_a_network_bind_needs_a_token():
    with pytest.raises(SettingsError, match="set --token TOKEN"):
        Settings(transport="http", host="0.0.0.0").check_authentication()
    Settings(transport="http", host="0.0.0.0", token="t").check_authentication()
    Settings(transport="http", host="0.0.0.0").check_authentication(identities=2)
    Settings(transport="http", host="localhost").check_authentication()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_allowed_origins_are_normalised():
    settings = Settings(allowed_origins="https://App.example.com/, http://x.test:3000")
    assert settings.origins == ("https://app.example.com", "http://x.test:3000")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.1}, "--temperature must be >= 0"),
        ({"temperature": float("nan")}, "--temperature must be >= 0"),
        ({"top_p": 0.0}, r"--top-p must be in \(0, 1\]"),
        ({"top_k": -1}, "--top-k must be >= 0"),
    ],
)
def test_sampling_settings_are_checked(kwargs, message):
    with pytest.raises(SettingsError, match=message):
        Settings(**kwargs)


def test_sampling_flags_override_environment():
    settings = parsed_settings(["--temperature", "0"], {"SQLSCOUT_TEMPERATURE": "0.9", "SQLSCOUT_TOP_K": "5"})
    assert (settings.temperature, settings.top_k, settings.top_p) == (0.0, 5, 0.95)

"""Prompts: our defaults, and the model directory's own read from `sqale_agent.py` without running it."""

from __future__ import annotations

import logging

import pytest

from mcp_server.agent.errors import PolicyConfigError
from mcp_server.agent.policies import build_policy
from mcp_server.agent.prompts import SYSTEM_PROMPT, Prompts, load_prompts

REFERENCE_LOOP = '''
import pathlib
pathlib.Path(__file__).with_name("executed.txt").write_text("ran")  # must never run

SYSTEM_PROMPT = (
    "You explore databases. "
    "Tools: list_tables, run_query."
)
USER_TEMPLATE: str = """Question: {question}
Hint: {evidence}"""
OTHER = "x" + "y"


def helper():
    SYSTEM_PROMPT = "not module level"
'''


def test_defaults_describe_the_eight_tools_and_the_reply_format():
    for tool in (
        "list_tables",
        "describe_table",
        "foreign_keys",
        "join_path",
        "sample_rows",
        "distinct_values",
        "run_query",
        "submit_sql",
    ):
        assert tool in SYSTEM_PROMPT
    assert '{"tool": "<tool name>", "args": {<arguments>}}' in SYSTEM_PROMPT and "SQLite" in SYSTEM_PROMPT
    assert Prompts().user_message("How many?") == "Question: How many?"
    assert Prompts().user_message("How many?", "x means y") == "Question: How many?\nEvidence: x means y"
    formatted = Prompts(user_template='Q: {question} {{"tool": ...}} {db}').user_message("Why {x}?")
    assert formatted == 'Q: Why {x}? {"tool": ...} {db}'
    assert Prompts(user_template='Q: {question} {"tool"}').user_message("Why?") == 'Q: Why? {"tool"}'


def test_reference_prompts_are_parsed_not_executed(tmp_path):
    (tmp_path / "sqale_agent.py").write_text(REFERENCE_LOOP)
    prompts = load_prompts(tmp_path)
    assert prompts.system == "You explore databases. Tools: list_tables, run_query."
    assert prompts.user_message("Q?", "E {with braces}") == "Question: Q?\nHint: E {with braces}"
    assert not (tmp_path / "executed.txt").exists()


def test_malformed_or_incomplete_reference_falls_back_with_a_warning(tmp_path, caplog):
    (tmp_path / "sqale_agent.py").write_text("SYSTEM_PROMPT = 'a' +\n")
    with caplog.at_level(logging.WARNING):
        assert load_prompts(tmp_path) == Prompts()
    assert "could not parse" in caplog.text
    caplog.clear()
    (tmp_path / "sqale_agent.py").write_text("SYSTEM_PROMPT = 'sys'\nUSER_TEMPLATE = f'{1}'\n")
    with caplog.at_level(logging.WARNING):
        assert load_prompts(tmp_path) == Prompts()
    assert "no literal SYSTEM_PROMPT and USER_TEMPLATE" in caplog.text
    assert load_prompts(tmp_path / "missing") == Prompts()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "no text-to-SQL model is configured: .*hf download"),
        ({"model_dir": "/nonexistent/sqlscout-model"}, "does not exist: .*hf download"),
        ({"endpoint": "http://127.0.0.1:9"}, "SQLSCOUT_ENDPOINT_MODEL"),
    ],
)
def test_build_policy_explains_how_to_configure_a_model(kwargs, message):
    with pytest.raises(PolicyConfigError, match=message):
        build_policy(**kwargs)


def test_build_policy_without_the_local_engine_says_how_to_install_it(tmp_path, monkeypatch):
    import model.errors

    real_find_spec = model.errors.importlib.util.find_spec
    monkeypatch.setattr(
        model.errors.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "torch" else real_find_spec(name, *args),
    )
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(PolicyConfigError) as refused:
        build_policy(model_dir=tmp_path)
    assert str(refused.value) == (
        "--model: the local engine needs torch, which this Python lacks: install it in the sqlscout checkout with "
        "`pip install -c constraints.txt '.[local]'` (`bash scripts/serve.sh --model DIR` installs it into .venv); "
        "or run the model on a server and give --endpoint URL"
    )

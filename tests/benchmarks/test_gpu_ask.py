"""The GPU suite's ask episode: its verdict and summary say whether the episode ran to its end as the protocol
says, and the suite's exit status follows it (its run on tiny shapes, without the server's packages, is in
test_gpu_machine_imports)."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks import gpu_suite
from benchmarks.gpu_ask import main, render, verdict
from tests.usage_errors import usage_error

SETTING = {
    "device": "NVIDIA H200",
    "shapes": "2b",
    "dtype": "bfloat16",
    "question": "Which five customers in Germany spent the most?",
    "turn_tokens": 256,
    "token_budget": 12288,
    "max_rounds": 6,
    "setup_s": 41.0,
    "decode_graphs": True,
}
COMPLETED = {
    **SETTING,
    "rounds": 7,
    "round_kinds": ["tool"] * 6 + ["answer"],
    "tool_calls": 0,
    "malformed_calls": 0,
    "prompt_tokens": 385,
    "generated_tokens": 1792,
    "sequence_tokens": 2570,
    "longest_reply_tokens": 256,
    "ending": "no_sql",
    "limit": "rounds",
    "wall_s": 9.5,
    "tokens_per_s": 190.0,
}


def summary(report: dict) -> list[str]:
    return render({**report, "problems": verdict(report)}).splitlines()


def test_an_episode_that_ran_every_round_completes():
    assert verdict(COMPLETED) == []
    lines = summary(COMPLETED)
    assert lines[0].startswith(
        "NVIDIA H200, 2b shapes, bfloat16, decode graphs True; replies cut at 256 tokens"
    )
    assert lines[1].startswith(
        "7 rounds (tool, tool, tool, tool, tool, tool, answer), 0 tool calls, 0 malformed"
    )
    assert "ending no_sql (limit rounds); 9.5 s wall, 190.0 generated tokens/s" in lines[1]
    assert lines[-1] == "completed"


def test_an_episode_that_raised_fails_with_the_error():
    report = {**SETTING, "error": "OutOfMemoryError: CUDA out of memory"}
    lines = summary(report)
    assert len(lines) == 2 and lines[-1] == "FAILED: the episode raised OutOfMemoryError: CUDA out of memory"


def test_decode_graphs_off_on_a_gpu_fail_but_not_on_a_cpu():
    eager = {**COMPLETED, "decode_graphs": False}
    assert verdict(eager) == ["decode graphs were off or fell back to eager decoding"]
    assert verdict({**eager, "device": "cpu"}) == []


def test_an_episode_beyond_the_protocol_limits_fails_with_each_reason():
    report = {
        **COMPLETED,
        "rounds": 8,
        "ending": "gave_up",
        "longest_reply_tokens": 300,
        "sequence_tokens": 12289,
    }
    assert verdict(report) == [
        "8 rounds, not 1 to 7",
        "unknown ending 'gave_up'",
        "a reply of 300 tokens, over the 256 cap",
        "12289 tokens, over the 12288-token budget",
    ]
    assert verdict({**COMPLETED, "rounds": 0, "generated_tokens": 0})[0] == "0 rounds, not 1 to 7"
    assert summary({**COMPLETED, "generated_tokens": 3})[-1] == "FAILED: 3 tokens generated in 7 rounds"


def test_a_turn_cap_below_one_is_a_usage_error(capsys):
    err = usage_error(lambda: main(["--turn-tokens", "0"]), capsys)
    assert "argument --turn-tokens: must be at least 1, got 0" in err


def fake_steps(monkeypatch, ask_output: str, ask_code: int) -> dict[str, float]:
    """The suite on a pretend GPU whose steps only write their last lines; returns each step's time limit."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_suite, "_machine", lambda: "a pretend H200")
    monkeypatch.setattr(gpu_suite, "run", lambda *args, **kwargs: [])
    limits = {}

    def run_logged(command: list[str], log_path: Path, timeout_s: float) -> tuple[int, str]:
        limits[log_path.stem] = timeout_s
        output, code = (ask_output, ask_code) if log_path.stem == "gpu_ask" else ("passed: all fine", 0)
        log_path.write_text(output + "\n")
        return code, output.splitlines()[-1]

    monkeypatch.setattr(gpu_suite, "_run_logged", run_logged)
    return limits


def test_the_suite_runs_the_ask_episode_and_fails_when_it_fails(tmp_path, monkeypatch, capsys):
    limits = fake_steps(monkeypatch, "7 rounds\nFAILED: the episode raised RuntimeError: boom", 1)
    assert gpu_suite.main(["--out", str(tmp_path), "--skip-tests", "--ask-timeout", "75"]) == 1
    assert limits["gpu_ask"] == 75
    summary = (tmp_path / "summary.md").read_text()
    section = summary.split("## An ask episode")[1].split("## ")[0]
    assert "exit code 1" in section and "FAILED: the episode raised RuntimeError: boom" in section
    assert capsys.readouterr().out.strip() == summary.strip()

    fake_steps(monkeypatch, "7 rounds\ncompleted", 0)
    assert gpu_suite.main(["--out", str(tmp_path), "--skip-tests"]) == 0
    assert "ok\n\n```\n7 rounds\ncompleted\n```" in (tmp_path / "summary.md").read_text()


def test_a_step_gets_at_most_what_is_left_of_the_suite_budget(tmp_path, monkeypatch):
    limits = fake_steps(monkeypatch, "completed", 0)
    assert gpu_suite.main(["--out", str(tmp_path), "--skip-tests", "--budget", "100"]) == 0
    assert limits["gpu_checks"] <= 100 and limits["gpu_ask"] <= 100 and limits["model_decode"] <= 100
    assert limits["speculative"] <= 100 and limits["gpu_profile"] <= 100

    limits = fake_steps(monkeypatch, "completed", 0)
    assert gpu_suite.main(["--out", str(tmp_path), "--budget", "0"]) == 1
    assert limits == {}
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("not run: the suite's time budget was spent") == 6

"""The GPU checks' verdicts: a disagreeing token or a cache beyond tolerance fails the check."""

from __future__ import annotations

import torch

from benchmarks.gpu_checks import Run, compare, render


def run_of(tokens: list[int], shift: float = 0.0) -> Run:
    logits = torch.linspace(-3.0, 3.0, 32)
    caches = [torch.ones(2, 3, 4), torch.arange(12.0).reshape(3, 4)]
    return Run(tokens, logits + shift, [c + shift for c in caches])


def test_identical_runs_pass():
    check = compare("same", run_of([5, 6, 7]), run_of([5, 6, 7]), 1e-3)
    assert check["passed"] and check["tokens_agreeing"] == "3 of 3"
    assert check["logits_relative_error"] == 0.0 and check["worst_cache_relative_error"] == 0.0


def test_a_disagreeing_token_fails_and_says_where():
    check = compare("token", run_of([5, 9, 7]), run_of([5, 6, 7]), 1e-3)
    assert not check["passed"] and check["tokens_agreeing"] == "1 of 3"


def test_a_cache_beyond_tolerance_fails():
    check = compare("cache", run_of([5, 6, 7], shift=0.05), run_of([5, 6, 7]), 1e-3)
    assert not check["passed"] and check["worst_cache_relative_error"] > 1e-3
    report = {"device": "cpu", "shapes": "tiny", "dtype": "torch.float32", "context": 16, "new_tokens": 3}
    text = render({**report, "graph_captured": False, "checks": [check]})
    assert text.splitlines()[1].startswith("FAILED: cache: tokens 3 of 3")

"""The GPU checks' verdicts: a disagreeing token or a cache beyond tolerance fails the check, and a backend further
from the fp32 reference than its peer at the same precision fails; the checks themselves run on a CPU at tiny shapes."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import gpu_checks
from benchmarks.gpu_checks import Run, against_reference, compare, render


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


def test_a_backend_as_close_to_the_reference_as_its_peer_passes():
    reference = run_of([5, 6, 7])
    peer, ours = run_of([5, 6, 7], shift=0.02), run_of([5, 6, 7], shift=-0.025)
    check = against_reference("backend", ours, peer, reference)
    assert check["passed"]
    assert check["peer_logits_relative_error"] < check["logits_relative_error"]


def test_a_backend_much_further_from_the_reference_than_its_peer_fails():
    reference = run_of([5, 6, 7])
    check = against_reference(
        "backend", run_of([5, 6, 7], shift=0.05), run_of([5, 6, 7], shift=0.02), reference
    )
    assert not check["passed"] and "allowed" in check["summary"]


def test_where_the_peer_is_exact_a_backend_gets_the_fp32_floor():
    reference = run_of([5, 6, 7])
    assert against_reference("fp32", run_of([5, 6, 7], shift=1e-6), reference, reference)["passed"]
    assert not against_reference("fp32", run_of([5, 6, 7], shift=1e-2), reference, reference)["passed"]


# Slow (left out of the fast tier): three tiny engines' prefill and decode, one through the Triton
# interpreter.
@pytest.mark.slow
def test_the_checks_pass_on_a_cpu_at_tiny_shapes(tmp_path):
    """The same code as on a GPU (Triton in its interpreter, fp32 throughout): Triton's greedy tokens forced into
    the torch reference leave the states Triton's own run left."""
    report = gpu_checks.run(tmp_path, shapes="tiny", context=24, new_tokens=4)
    assert [c["passed"] for c in report["checks"]] == [True, True]
    assert report["checks"][1]["logits_relative_error"] < 1e-4
    assert json.loads((tmp_path / "gpu_checks.json").read_text()) == report

"""The profile of a decode step and an agent turn, run on a CPU at tiny shapes (its ops stand in for kernels): each
phase's device-busy time is within its wall time, and its table ranks the ops that took it."""

from __future__ import annotations

import json

from benchmarks import gpu_profile


def test_each_phase_ranks_the_work_that_took_its_time(tmp_path):
    report = gpu_profile.run(tmp_path, context=48, shapes="tiny")
    assert json.loads((tmp_path / "gpu_profile.json").read_text()) == report
    for phase in ("decode_step", "agent_turn", "verify_pass"):
        part = report[phase]
        times = [k["us_per_unit"] for k in part["kernels"]]
        assert 0 < part["busy_us"] <= part["wall_us"], phase
        assert times == sorted(times, reverse=True) and sum(times) <= part["busy_us"] + 1
        assert 0 < sum(k["share"] for k in part["kernels"]) <= 1.001
    # A decode step runs every layer's products: the CPU product op is called at least once per layer.
    products = [k for k in report["decode_step"]["kernels"] if "linear" in k["kernel"]]
    assert products and products[0]["calls_per_unit"] >= 4
    assert "decode_step: wall" in gpu_profile.render(report)
    timed = list(report["replayed_ms_per_token"])
    assert timed == [name for name, _, _ in gpu_profile.REPLAYED] + ["sampled, through the batch scheduler"]
    assert all(ms > 0 for ms in report["replayed_ms_per_token"].values())

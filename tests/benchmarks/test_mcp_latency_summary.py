"""The latency benchmark's summary: medians per transport and tool, each against the direct call."""

import pytest

from benchmarks.mcp_latency import CALLS, current, render, summarise


def test_summary_ratios_are_against_the_direct_call():
    results = {
        "direct": {tool: [0.001, 0.003, 0.002] for tool in CALLS},
        "stdio": {tool: [0.010, 0.030, 0.020, 0.5] for tool in CALLS},
    }
    summary = summarise(results)
    tool = next(iter(CALLS))
    assert summary["direct"][tool]["median_ms"] == pytest.approx(2.0)
    assert summary["stdio"][tool]["median_ms"] == pytest.approx(25.0)
    assert summary["stdio"][tool]["vs_direct"] == pytest.approx(12.5)
    assert summary["stdio"][tool]["p90_ms"] == pytest.approx(30.0)
    table = render(summary)
    assert "stdio / direct" in table and "12.5x" in table
    current_table = current(summary, "a machine", "2026-01-01 00:00")
    assert current_table.columns == ["tool", "direct ms", "stdio ms", "stdio adds ms"]
    assert current_table.rows[0] == [tool, "2.00", "25.00", "23.00"]

"""Aggregate episode records into the evaluation report, overall and by difficulty, and render it as text."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summarise(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The measures of a group of episodes.

    execution_accuracy counts only questions whose gold query ran (gold_failures are reported apart);
    opened_gold_tables is over episodes whose gold SQL names a table; literals_seen is the share of all gold
    literals of the group that some tool output showed before the answer.
    """
    scored = [e for e in episodes if e["correct"] is not None]
    with_tables = [e for e in episodes if e["gold_tables"]]
    literals = sum(len(e["gold_literals"]) for e in episodes)
    seen = sum(len(e["literals_seen"]) for e in episodes)
    latencies = [e["latency_s"] for e in episodes]
    return {
        "episodes": len(episodes),
        "scored": len(scored),
        "correct": sum(1 for e in scored if e["correct"]),
        "execution_accuracy": (sum(1 for e in scored if e["correct"]) / len(scored)) if scored else None,
        "gold_failures": len(episodes) - len(scored),
        "gold_differs_from_recorded": sum(1 for e in episodes if e.get("gold_matches_recorded") is False),
        "endings": dict(Counter(e["ending"] for e in episodes).most_common()),
        "mean_rounds": _mean([e["rounds"] for e in episodes]),
        "mean_tool_calls": _mean([e["tool_calls"] for e in episodes]),
        "opened_gold_tables": _mean([float(e["opened_gold_tables"]) for e in with_tables]),
        "gold_literals": literals,
        "literals_seen": (seen / literals) if literals else None,
        "mean_prompt_tokens": _mean([e["tokens"]["prompt"] for e in episodes]),
        "mean_generated_tokens": _mean([e["tokens"]["generated"] for e in episodes]),
        "mean_sequence_tokens": _mean([e["tokens"]["sequence"] for e in episodes]),
        # Tokens the model ran (all samples); only the local engine can count them.
        "mean_processed_tokens": _mean(
            [e["processed_tokens"] for e in episodes if e.get("processed_tokens") is not None]
        ),
        "latency_s": {
            "mean": _mean(latencies),
            "p50": _percentile(latencies, 0.5),
            "p95": _percentile(latencies, 0.95),
        },
        "mean_model_s": _mean([e["model_s"] for e in episodes]),
        "mean_db_s": _mean([e["db_s"] for e in episodes]),
    }


def build_report(episodes: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """Settings, the overall summary and one summary per difficulty (in order of first appearance)."""
    difficulties = list(dict.fromkeys(e["difficulty"] for e in episodes))
    return {
        "settings": settings,
        "overall": summarise(episodes),
        "by_difficulty": {d: summarise([e for e in episodes if e["difficulty"] == d]) for d in difficulties},
    }


def _cell(value: Any, percent: bool = False) -> str:
    if value is None:
        return "-"
    if percent:
        return f"{100 * value:.1f}%"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def render_report(report: dict[str, Any]) -> str:
    """A plain-text table: one column per group (overall first), one line per measure."""
    groups = {"overall": report["overall"], **report["by_difficulty"]}
    lines = [
        ("questions", lambda s: _cell(s["episodes"])),
        ("scored (gold ran)", lambda s: _cell(s["scored"])),
        ("gold query failed", lambda s: _cell(s["gold_failures"])),
        ("gold differs from recorded result", lambda s: _cell(s["gold_differs_from_recorded"])),
        ("execution accuracy", lambda s: _cell(s["execution_accuracy"], percent=True)),
        ("opened every gold table", lambda s: _cell(s["opened_gold_tables"], percent=True)),
        ("gold literals seen", lambda s: _cell(s["literals_seen"], percent=True)),
        ("rounds / episode", lambda s: _cell(s["mean_rounds"])),
        ("tool calls / episode", lambda s: _cell(s["mean_tool_calls"])),
        ("prompt tokens / episode", lambda s: _cell(s["mean_prompt_tokens"])),
        ("generated tokens / episode", lambda s: _cell(s["mean_generated_tokens"])),
        ("tokens run by the model / episode", lambda s: _cell(s["mean_processed_tokens"])),
        ("latency mean s", lambda s: _cell(s["latency_s"]["mean"])),
        ("latency p95 s", lambda s: _cell(s["latency_s"]["p95"])),
        ("model s / episode", lambda s: _cell(s["mean_model_s"])),
        ("database s / episode", lambda s: _cell(s["mean_db_s"])),
    ]
    width = max(len(name) for name, _ in lines)
    columns = [[name] + [render(summary) for _label, render in lines] for name, summary in groups.items()]
    widths = [max(len(cell) for cell in column) for column in columns]
    out = [" " * width + "  " + "  ".join(c[0].rjust(w) for c, w in zip(columns, widths, strict=True))]
    for index, (name, _) in enumerate(lines, start=1):
        out.append(
            name.ljust(width)
            + "  "
            + "  ".join(c[index].rjust(w) for c, w in zip(columns, widths, strict=True))
        )
    for name, summary in groups.items():
        endings = ", ".join(f"{ending} {count}" for ending, count in summary["endings"].items())
        out.append(f"endings ({name}): {endings}")
    return "\n".join(out)

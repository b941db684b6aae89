"""Shared matplotlib helpers for the benchmark plots (PNG files referenced from RESULTS.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def grouped_bars(
    path: str | Path,
    *,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    ylabel: str,
    log_scale: bool = False,
) -> Path:
    """One cluster of bars per group, one bar per series, each labelled with its value."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) + 2), 4.2))
    width = 0.8 / max(1, len(series))
    for index, (name, values) in enumerate(series.items()):
        positions = [g + (index - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = axes.bar(positions, values, width, label=name)
        axes.bar_label(bars, labels=[_label(v) for v in values], fontsize=7, padding=1)
    axes.set_xticks(range(len(groups)), groups, rotation=15)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if log_scale:
        axes.set_yscale("log")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path


def stacked_bars(
    path: str | Path,
    *,
    title: str,
    groups: Sequence[str],
    parts: Mapping[str, Sequence[float]],
    ylabel: str,
) -> Path:
    """One bar per group split into its parts (for example where an episode's time goes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(max(5.0, 1.4 * len(groups) + 2), 4.2))
    bottoms = [0.0] * len(groups)
    for name, values in parts.items():
        axes.bar(range(len(groups)), values, 0.6, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for index, total in enumerate(bottoms):
        axes.annotate(_label(total), (index, total), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(range(len(groups)), groups)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path

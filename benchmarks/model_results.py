"""Writes one named section of benchmarks/RESULTS.md, leaving every other section as it is."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.tables import RESULTS


def record_section(title: str, body: str, path: Path = RESULTS) -> None:
    """Replace the `## title` section of path with body, or append it when the section is new."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)

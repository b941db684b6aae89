"""Errors raised while opening a model directory; every message says what to do."""

from __future__ import annotations

DOWNLOAD_HINT = "hf download trl-lab/qwen3.5-2b-grpo-sqale --local-dir DIR"


class ModelDirectoryError(Exception):
    """The model directory is missing, incomplete or holds something this engine cannot run."""

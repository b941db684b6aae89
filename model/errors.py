"""Errors raised while opening a model directory or starting the local engine; every message says what to do."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOWNLOAD_HINT = "hf download trl-lab/qwen3.5-2b-grpo-sqale --local-dir DIR"
# What `pip install sqlscout` leaves out: the local engine comes with the `local` extra.
LOCAL_ENGINE_PACKAGES = ("torch", "safetensors")
LOCAL_ENGINE_INSTALL = (
    "install it with `pip install 'sqlscout[local]'` (from a source checkout, `bash scripts/serve.sh` "
    "installs it into .venv)"
)


class ModelDirectoryError(Exception):
    """The model directory is missing, incomplete or holds something this engine cannot run."""


def no_config_message(model_dir: str | Path) -> str:
    """Why a directory without config.json is not a model directory, what one holds and how to get one."""
    return (
        f"{model_dir} has no config.json, so it is not a model directory: give the directory that holds the "
        f"model's config.json, tokenizer and safetensors weights (download it with `{DOWNLOAD_HINT}`)"
    )


def missing_local_engine() -> str | None:
    """Why the local engine cannot run in this Python (its packages are not installed), or None if it can."""
    # find_spec looks the packages up without importing them: importing torch alone takes seconds.
    missing = [name for name in LOCAL_ENGINE_PACKAGES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"the local engine needs {' and '.join(missing)}, which this Python lacks: {LOCAL_ENGINE_INSTALL}"

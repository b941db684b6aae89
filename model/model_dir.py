"""The one check that a path is a model directory, kept free of torch so that settings can run it at start-up."""

from __future__ import annotations

from pathlib import Path

from model.errors import DOWNLOAD_HINT, ModelDirectoryError

CONFIG_FILE = "config.json"


def check_model_dir(model_dir: str | Path, *, needs_config: bool = True) -> Path:
    """model_dir as a Path (`~` expanded), or ModelDirectoryError saying what is wrong and how to get a model.

    needs_config=False also accepts a directory without config.json: one that only lends an endpoint its
    tokenizer, chat template and prompts.
    """
    path = Path(model_dir).expanduser()
    if path.is_file():
        raise ModelDirectoryError(f"{path} is a file: give the directory that holds it, {path.parent}")
    if not path.is_dir():
        raise ModelDirectoryError(
            f"{path} does not exist: give the directory that holds the model's {CONFIG_FILE}, tokenizer and "
            f"safetensors weights (download it with `{DOWNLOAD_HINT.replace('DIR', str(path))}`)"
        )
    if needs_config and not (path / CONFIG_FILE).is_file():
        raise ModelDirectoryError(
            f"{path} has no {CONFIG_FILE}, so it is not a model directory: give the directory that holds the "
            f"model's {CONFIG_FILE}, tokenizer and safetensors weights (download it with `{DOWNLOAD_HINT}`)"
        )
    return path

"""Errors raised while opening a model directory, checking the engine's options or starting the local engine; every
message says what to do."""

from __future__ import annotations

import importlib.util

DOWNLOAD_HINT = "hf download trl-lab/qwen3.5-2b-grpo-sqale --local-dir DIR"
# What `pip install .` leaves out: the local engine comes with the `local` extra.
LOCAL_ENGINE_PACKAGES = ("torch", "safetensors")
LOCAL_ENGINE_INSTALL = (
    "install it in the sqlscout checkout with `pip install -c constraints.txt '.[local]'` (`bash scripts/serve.sh --model DIR` "
    "installs it into .venv)"
)


class ModelDirectoryError(Exception):
    """The model directory is missing, incomplete or holds something this engine cannot run."""


class OptionError(ValueError):
    """An engine or sampling option has a value the engine cannot run with; `option` is its field name."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option} {problem}")
        self.option = option
        self.problem = problem

    @property
    def flag_message(self) -> str:
        """The message naming the option by its command-line flag (the fields' flags share their names)."""
        return f"--{self.option.replace('_', '-')} {self.problem}"


def missing_local_engine() -> str | None:
    """Why the local engine cannot run in this Python (its packages are not installed), or None if it can."""
    # find_spec looks the packages up without importing them: importing torch alone takes seconds.
    missing = [name for name in LOCAL_ENGINE_PACKAGES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"the local engine needs {' and '.join(missing)}, which this Python lacks: {LOCAL_ENGINE_INSTALL}"

"""The check that the command-line tests share: a command stops with a usage error."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def usage_error(run: Callable[[], object], capsys: pytest.CaptureFixture[str]) -> str:
    """Call `run` (a command's main or parser), expect a usage error (exit status 2) and return its stderr."""
    with pytest.raises(SystemExit) as exit_info:
        run()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "error: " in err, err
    return err

"""Command lines quoted for the shell a person pastes them into: a POSIX shell, PowerShell or cmd."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence

SHELLS = ("posix", "powershell", "cmd")
SHELL_NAMES = {"posix": "a POSIX shell (sh, bash, zsh)", "powershell": "PowerShell", "cmd": "cmd.exe"}

# Words PowerShell passes on as typed. Anything else is single-quoted: `--` too, which PowerShell would take
# as its own end-of-parameters marker and drop before a script such as the npm shim claude.ps1, and words
# that start with a digit, which PowerShell may read as numbers.
_POWERSHELL_BARE = re.compile(r"--?[A-Za-z][A-Za-z-]*|[A-Za-z][A-Za-z0-9_./\\:=-]*")
# PowerShell ends a single-quoted string at the typographic single quotes as well.
_POWERSHELL_SINGLE_QUOTES = re.compile("['\u2018\u2019\u201a\u201b]")
_CMD_BARE = re.compile(r"[A-Za-z0-9_./\\:-]+")
# The C runtime that splits a Windows program's command line reads 2n backslashes before a quote as n.
_BACKSLASHES_BEFORE_QUOTE = re.compile(r'(\\+)(?="|\Z)')


def default_shell() -> str:
    """The shell a command is usually typed into on this platform."""
    return "powershell" if sys.platform == "win32" else "posix"


def join_command(words: Sequence[str], shell: str) -> str:
    """One command line that `shell` (one of SHELLS) splits back into exactly `words`."""
    quote = {"posix": shlex.quote, "powershell": powershell_quote, "cmd": cmd_quote}[shell]
    return " ".join(quote(word) for word in words)


def powershell_quote(word: str) -> str:
    """`word` bare when PowerShell reads it as itself, else single-quoted (no expansion of `$`, backticks)."""
    if _POWERSHELL_BARE.fullmatch(word):
        return word
    return "'" + _POWERSHELL_SINGLE_QUOTES.sub(lambda quote: quote.group() * 2, word) + "'"


def cmd_quote(word: str) -> str:
    """`word` for cmd.exe and the C runtime behind it: double-quoted, embedded double quotes doubled.

    cmd expands `%NAME%` even inside double quotes and has no escape there, so each `%` stands between
    quoted pieces as `^%`, which cmd reads as a plain `%` after it has looked for variables.
    """
    if _CMD_BARE.fullmatch(word):
        return word
    if "\n" in word or "\r" in word:
        raise ValueError(f"cmd cannot pass a line break inside an argument ({word!r}): use PowerShell")
    return "^%".join(_cmd_double_quoted(piece) for piece in word.split("%"))


def _cmd_double_quoted(text: str) -> str:
    text = _BACKSLASHES_BEFORE_QUOTE.sub(r"\1\1", text)
    return '"' + text.replace('"', '""') + '"'

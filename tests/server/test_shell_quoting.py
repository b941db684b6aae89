"""Command lines for POSIX shells (checked by a real sh), PowerShell and cmd.exe (checked against their rules)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcp_server.shell_quoting import cmd_quote, default_shell, join_command, powershell_quote

WINDOWS_PYTHON = r"C:\Program Files\Python311\python.exe"
TRICKY_WORDS = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "$HOME and `date` and $(id)",
    "100% %PATH%",
    "back\\slash\\",
    WINDOWS_PYTHON,
    "a & b | c > d ; e ^ f",
    "--",
    "",
    "ünïcode’s",
    "line\nbreak",
]


def test_a_posix_shell_splits_the_line_back_into_the_words():
    # sh runs printf with the quoted words as arguments; NUL ends each one as the shell passed it.
    script = "printf '%s\\0' " + join_command(TRICKY_WORDS, "posix")
    done = subprocess.run(["sh", "-c", script], capture_output=True, check=True)
    assert done.stdout.decode().split("\0")[:-1] == TRICKY_WORDS


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("mcp_server", "mcp_server"),
        ("--max-rows", "--max-rows"),
        (r"C:\data\shop.sqlite", r"C:\data\shop.sqlite"),
        # single quotes take everything literally: no $ expansion, no backtick escapes, no % meaning
        ("$HOME `n 100%", "'$HOME `n 100%'"),
        ("it's", "'it''s'"),
        ("it\u2019s", "'it\u2019\u2019s'"),  # PowerShell also reads typographic quotes as quotes
        ('say "hi"', "'say \"hi\"'"),
        (WINDOWS_PYTHON, f"'{WINDOWS_PYTHON}'"),
        ("--", "'--'"),  # bare, PowerShell may take it as its own end-of-parameters marker
        ("50", "'50'"),  # bare, PowerShell may read it as a number
        ("", "''"),
    ],
)
def test_powershell_quoting(word, quoted):
    assert powershell_quote(word) == quoted


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("mcp_server", "mcp_server"),
        (r"C:\data\shop.sqlite", r"C:\data\shop.sqlite"),
        (WINDOWS_PYTHON, f'"{WINDOWS_PYTHON}"'),
        ('say "hi"', '"say ""hi"""'),
        ("a & b | c > d ^ e", '"a & b | c > d ^ e"'),
        ("$HOME it's", '"$HOME it\'s"'),
        # cmd expands %NAME% inside double quotes: each % stands outside them, escaped
        ("100% %PATH%", '"100"^%" "^%"PATH"^%""'),
        # before a quote the C runtime halves backslashes, so they are doubled there, and only there
        ("dir\\ with space\\", '"dir\\ with space\\\\"'),
        ('a\\"b', '"a\\\\""b"'),
        ("a\\%b", '"a\\\\"^%"b"'),
        ("", '""'),
    ],
)
def test_cmd_quoting(word, quoted):
    assert cmd_quote(word) == quoted


def test_cmd_refuses_a_line_break():
    with pytest.raises(ValueError, match="use PowerShell"):
        cmd_quote("line\nbreak")


def test_the_default_shell_follows_the_platform(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    assert default_shell() == "powershell"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert default_shell() == "posix"

"""The server's option table in docs/server.md against the parsers: every flag `sqlscout --help` shows must be in
the table, and the table may name no flag the commands lack, so the reference cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from mcp_server.cli import build_parser

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def _table_flags() -> set[str]:
    """The flags in the first column of the option table's rows."""
    flags = set()
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("| `--"):
            first_cell = line.split("|")[1]
            flags |= set(re.findall(r"--[a-z][a-z0-9-]*", first_cell))
    return flags


def _parser_flags(command: str) -> set[str]:
    """Each option's first long flag (a switch's --no- form goes with it)."""
    parser = build_parser(command)
    return {
        next(option for option in action.option_strings if option.startswith("--"))
        for action in parser._actions
        if action.option_strings and action.dest != "help"
    }


def test_every_flag_of_the_server_is_in_the_reference_and_no_other():
    documented = _table_flags()
    assert _parser_flags("serve") - documented == set(), f"flags missing from {REFERENCE.name}'s option table"
    # The table also documents `config`'s own flags; `ask`'s two are in its usage line above the table.
    real = _parser_flags("serve") | _parser_flags("config") | _parser_flags("ask")
    assert documented - real == set(), f"{REFERENCE.name} names flags no command has"

"""What a MySQL or MariaDB account may do beyond reading, from its SHOW GRANTS lines."""

from __future__ import annotations

import re

_GRANT = re.compile(r"^GRANT\s+(.+?)\s+ON\s+.+?\s+TO\s+", re.IGNORECASE | re.DOTALL)
_COLUMN_LIST = re.compile(r"\([^)]*\)")
# Privileges that only read (USAGE is "no privilege"); everything else can write, lock, read files or administer.
_READING = {"SELECT", "SHOW VIEW", "USAGE"}


def privileges_beyond_select(grant_lines: list[str]) -> list[str]:
    """The privileges in `grant_lines` other than reading ones, in the order first granted ("ALL PRIVILEGES",
    "FILE", "GRANT OPTION", ...)."""
    extra: list[str] = []
    for line in grant_lines:
        matched = _GRANT.match(line.strip())
        if matched is None:
            continue  # a role granted to the account: its privileges have lines of their own when active
        names = [" ".join(p.split()).upper() for p in _COLUMN_LIST.sub("", matched.group(1)).split(",")]
        if re.search(r"\bWITH\s+GRANT\s+OPTION\b", line, re.IGNORECASE):
            names.append("GRANT OPTION")
        extra += [n for n in names if n and n not in _READING and n not in extra]
    return extra

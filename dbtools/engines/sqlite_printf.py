"""printf() and format() for SQLite user queries, refused where SQLite would spend seconds inside one call.

The deadline is checked between VM instructions, never inside a function call, and the value cap does not
shorten this one: for printf('%.*c', n, 'x') SQLite (3.40 and older) keeps appending the character n times
after the value has outgrown the cap, so a precision of a billion holds the call for 5 to 20 s. The guard
reads the format, refuses a %c precision over the cap, and hands every call it lets through to SQLite's own
printf on a private in-memory connection, so results stay SQLite's; the hand-over costs about ten
microseconds a call.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading

# One conversion: flags, width, precision, size modifier, conversion character (as SQLite's printf reads it).
_CONVERSION = re.compile(r"%[-+ #!,0]*(\*|\d+)?(?:\.(\*|\d*))?(?:ll|l)?(.?)", re.DOTALL)
_LEADING_INTEGER = re.compile(r"\s*[-+]?\d+")
_refusals = threading.local()  # the last refusal on this thread, for the error handler to report


def install_printf_guard(conn: sqlite3.Connection, value_cap_bytes: int) -> None:
    """Replace printf() and format() on `conn` by the guard, refusing %c precisions over the value cap."""
    guard = _PrintfGuard(value_cap_bytes)
    _refusals.message = None
    for name in ("printf", "format"):
        conn.create_function(name, -1, guard, deterministic=True)


def take_printf_refusal() -> str | None:
    """Why the guard refused a call on this thread, once; None when it did not."""
    message, _refusals.message = getattr(_refusals, "message", None), None
    return message


class _PrintfGuard:
    def __init__(self, value_cap_bytes: int) -> None:
        self.value_cap_bytes = value_cap_bytes
        self._builtin: sqlite3.Connection | None = None
        self._statements: dict[int, str] = {}

    def __call__(self, *args: object) -> object:
        if args and isinstance(args[0], str):
            precision = _largest_char_precision(args[0], args[1:])
            if precision > self.value_cap_bytes:
                _refusals.message = (
                    f"printf(): a %c precision of {precision} would build a value over the "
                    f"{self.value_cap_bytes // 2**20} MiB value cap; use a smaller precision"
                )
                raise ValueError(_refusals.message)
        if self._builtin is None:
            self._builtin = sqlite3.connect(":memory:", check_same_thread=False)
            if hasattr(self._builtin, "setlimit"):  # Python 3.11+
                self._builtin.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.value_cap_bytes)
        statement = self._statements.setdefault(len(args), f"SELECT printf({', '.join('?' * len(args))})")
        return self._builtin.execute(statement, args).fetchone()[0]


def _largest_char_precision(template: str, args: tuple[object, ...]) -> int:
    """The largest precision any %c conversion of `template` gets, taking `*` from `args` as SQLite does."""
    largest = 0
    next_arg = 0
    for width, precision, conversion in _CONVERSION.findall(template):
        if conversion == "%":
            continue
        if width == "*":
            next_arg += 1
        if precision == "*":
            value = abs(_as_integer(args[next_arg])) if next_arg < len(args) else 0
            next_arg += 1
        else:
            value = int(precision or 0)
        if conversion == "c":
            largest = max(largest, value)
        next_arg += 1
    return largest


def _as_integer(value: object) -> int:
    """An argument as SQLite's printf reads a `*`: integers as they are, reals truncated, text by its leading
    digits, anything else 0; a real too large for an integer counts as huge."""
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 2**63
    if isinstance(value, (str, bytes)):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        matched = _LEADING_INTEGER.match(text)
        return int(matched.group()) if matched else 0
    return 0

"""Reads a model reply: its reasoning, the bare JSON tool calls after it, and SQL given as a plain answer.

Calls count only after the `</think>` that closes the reasoning: a call written while thinking is a plan,
not an action. A reply whose reasoning never closes (the turn opened `<think>` and ran out) has no calls.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# A key named "tool" marks an attempted call, even when its JSON does not parse.
_CALL_MARKER = re.compile(r"""["']tool["']\s*:""")
_CALL_START = re.compile(r"""\{\s*["']tool["']\s*:""")
# Outside quoted strings only: a trailing comma before } or ], and JSON's bare true/false/null.
_STRING_OR_FIXABLE = re.compile(
    r"""("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|,(\s*[}\]])|\b(true|false|null)\b"""
)
_PYTHON_CONSTANTS = {"true": "True", "false": "False", "null": "None"}
MAX_STATEMENT_CUTS = 20
# Each object left open is scanned to the end of the text: a degenerate reply must not make this quadratic.
MAX_UNCLOSED_OBJECTS = 16
# Calls are looked for this deep inside other objects; degenerate nesting must not exhaust the stack.
MAX_NESTED_OBJECTS = 8
_SQL_FENCE = re.compile(r"```[ \t]*(\w*)[^\n]*\n(.*?)```", re.DOTALL)
_SQL_START = re.compile(r"\b(SELECT|WITH\s+(?:RECURSIVE\s+)?[\w\"`\[\]]+\s*(?:\([^)]*\))?\s+AS\s*\()", re.I)


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it."""

    tool: str
    args: dict

    def to_json(self) -> str:
        return json.dumps({"tool": self.tool, "args": self.args}, ensure_ascii=False)


@dataclass
class ParsedReply:
    """A reply split into reasoning and action, with the calls found in the action."""

    reasoning: str
    action: str
    calls: list[ToolCall] = field(default_factory=list)
    malformed_calls: int = 0  # objects that looked like calls (a "tool" key) but did not parse


def split_reasoning(text: str, *, thinking_open: bool = True) -> tuple[str, str]:
    """(reasoning, action): the text up to the last `</think>` and what follows it.

    thinking_open: the assistant header already opened a `<think>` block, so a reply without
    `</think>` is all reasoning.
    """
    if THINK_CLOSE in text:
        reasoning, action = text.rsplit(THINK_CLOSE, 1)
        return reasoning.replace(THINK_OPEN, "").strip(), action.strip()
    if thinking_open or THINK_OPEN in text:
        return text.replace(THINK_OPEN, "").strip(), ""
    return "", text.strip()


def _balanced_object_end(text: str, start: int) -> int | None:
    """Index just past the `}` that closes the `{` at start, honouring quoted strings; None if unclosed."""
    depth = 0
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _repair(candidate: str, *, python_constants: bool) -> str:
    """Drop trailing commas (and, for a Python literal, spell JSON constants the Python way) outside strings."""

    def fix(match: re.Match) -> str:
        string, after_comma, constant = match.groups()
        if string is not None:
            return string
        if after_comma is not None:
            return after_comma
        return _PYTHON_CONSTANTS[constant] if python_constants else constant

    return _STRING_OR_FIXABLE.sub(fix, candidate)


def _load_object(candidate: str) -> object | None:
    """JSON first; then without trailing commas; then a Python literal (single quotes, True/None).

    Control characters may stand raw inside strings: the model often writes multi-line SQL unescaped.
    """
    for attempt in (candidate, _repair(candidate, python_constants=False)):
        try:
            return json.loads(attempt, strict=False)
        except (json.JSONDecodeError, RecursionError):
            pass
    try:
        value = ast.literal_eval(_repair(candidate, python_constants=True))
    # TypeError: `{{}}` reads as a set holding a dict.
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    try:
        json.dumps(value)  # a Python-only value (a set, bytes, 2j) cannot be echoed back or traced
    except (TypeError, ValueError):
        return None
    return value


def _as_call(obj: object) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("tool"), str):
        return None
    args = obj.get("args", obj.get("arguments", {}))
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None
    return ToolCall(tool=obj["tool"].strip(), args=args)


def find_calls(action: str, depth: int = 0) -> tuple[list[ToolCall], int]:
    """Every `{"tool": ..., "args": {...}}` object in the text, in order, and how many were malformed.

    Fences and prose around the objects are ignored; an object that fails to parse is skipped and the
    scan resumes inside it, so a valid call nested in broken text is still found.
    """
    calls: list[ToolCall] = []
    malformed = 0
    unclosed = 0
    pos = 0
    while (start := action.find("{", pos)) != -1:
        end = _balanced_object_end(action, start)
        if end is None:
            # A dropped brace leaves the object open to the end of the text; later calls still count.
            restart = _CALL_START.search(action, start + 1)
            own_text = action[start : restart.start() if restart else len(action)]
            if _CALL_MARKER.search(own_text):
                malformed += 1
            unclosed += 1
            if restart is None or unclosed >= MAX_UNCLOSED_OBJECTS:
                break
            pos = restart.start()
            continue
        candidate = action[start:end]
        call = _as_call(_load_object(candidate))
        if call is not None:
            calls.append(call)
            pos = end
            continue
        inner_calls, inner_malformed = (
            find_calls(candidate[1:-1], depth + 1) if depth < MAX_NESTED_OBJECTS else ([], 0)
        )
        if inner_calls:
            calls.extend(inner_calls)
            malformed += inner_malformed
        elif _CALL_MARKER.search(candidate):
            malformed += 1
        pos = end
    return calls, malformed


def parse_reply(text: str, *, thinking_open: bool = True) -> ParsedReply:
    """Split a reply and collect its calls."""
    reasoning, action = split_reasoning(text, thinking_open=thinking_open)
    calls, malformed = find_calls(action)
    return ParsedReply(reasoning=reasoning, action=action, calls=calls, malformed_calls=malformed)


def is_query(sql: str) -> bool:
    """True when the text parses (SQLite dialect) as exactly one query."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="sqlite") if s is not None]
    except (sqlglot.errors.SqlglotError, RecursionError):  # degenerate nesting, e.g. a run of parentheses
        return False
    return len(statements) == 1 and isinstance(statements[0], exp.Query)


def _clean(sql: str) -> str:
    return sql.strip().rstrip(";").strip()


def extract_sql(action: str) -> str | None:
    """The SQL of a plain answer: the last ```sql (or unlabelled) fence holding a query, else a bare
    SELECT/WITH statement running to its semicolon or the end of the text."""
    fenced = [
        _clean(body)
        for lang, body in _SQL_FENCE.findall(action)
        if lang.lower() in ("sql", "sqlite", "") and is_query(_clean(body))
    ]
    if fenced:
        return fenced[-1]
    for match in _SQL_START.finditer(action):
        tail = action[match.start() :]
        # The statement ends at the first semicolon that leaves a whole query (one inside a string does not).
        for semicolon in [m.start() for m in re.finditer(";", tail)][:MAX_STATEMENT_CUTS]:
            if is_query(tail[:semicolon]):
                return _clean(tail[:semicolon])
        # No semicolon: prose may follow the statement on later lines, dropped until it parses.
        lines = tail.split(";", 1)[0].splitlines()
        while lines:
            candidate = _clean("\n".join(lines))
            if is_query(candidate):
                return candidate
            lines.pop()
    return None

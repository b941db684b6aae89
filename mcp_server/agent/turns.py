"""The user turns the environment writes: tool results with the budget line, the reminder, the forced answer."""

from __future__ import annotations

FORCED_ANSWER_INTRO = (
    "You have reached the exploration limit. Now generate the final SQL query to answer the question. "
    "Return only the SQL query."
)
FORCED_ANSWER_LAST_QUERY = (
    " Your last query that executed without error was:\n{sql}\nIf you are not sure of an improvement, "
    "return that query."
)

FORMAT_REMINDER = (
    "Your reply had no tool call. After </think>, write a tool call as a bare JSON object "
    '{"tool": "<tool name>", "args": {...}}, or submit your final query with submit_sql.'
)


def budget_line(turns_left: int) -> str:
    """`[N tool turns left before you must answer]`, singular for one."""
    noun = "turn" if turns_left == 1 else "turns"
    return f"[{turns_left} tool {noun} left before you must answer]"


def forced_answer_message(last_good_sql: str | None) -> str:
    """The protocol's final-turn message; without a query that ran, only its first two sentences."""
    if last_good_sql is None:
        return FORCED_ANSWER_INTRO
    return FORCED_ANSWER_INTRO + FORCED_ANSWER_LAST_QUERY.format(sql=last_good_sql)


def result_entry(call_json: str, output: str) -> str:
    """One result of a round, introduced by the call it answers."""
    return f"{call_json}\n{output}"


def results_turn(entries: list[str], closing: str) -> str:
    """A round's results, separated by blank lines, then the budget line (or the forced-answer message)."""
    return "\n\n".join([*entries, closing])

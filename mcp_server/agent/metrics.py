"""Grounding metrics of an episode: the tables it touched and the question's literals it saw.

A question's literals are what a query would have to match verbatim: quoted strings ('Sales', "O'Hara"),
runs of capitalised words that do not start a sentence (New York, Alice Smith), and numbers (2019, 3.5).
The evidence note adds its quoted strings. A literal counts as seen when some tool output before the
answer contains it as a whole word or phrase, ignoring case.
"""

from __future__ import annotations

import re

from mcp_server.agent.trace import EpisodeTrace

# A single quote opens a literal only after a non-word character: "Smith's" holds an apostrophe.
_QUOTED = re.compile(r"(?<!\w)'([^']+)'(?!\w)|\"([^\"]+)\"|‘([^’]+)’|“([^”]+)”")
_CAPITALISED_RUN = re.compile(r"\b[A-Z][\w&'.-]*(?:\s+[A-Z][\w&'.-]*)*")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]*\w)")
_SENTENCE_START = re.compile(r"(?:^|[.?!:;]\s+|\n)\s*$")


def _quoted(text: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]


def question_literals(question: str, evidence: str | None = None) -> list[str]:
    """The literals of a question (and quoted strings of its evidence), first occurrence order."""
    found = _quoted(question)
    unquoted = _QUOTED.sub(" ", question)
    for match in _CAPITALISED_RUN.finditer(unquoted):
        words = match.group().split()
        if _SENTENCE_START.search(unquoted[: match.start()]):
            words = words[1:]  # a sentence's first word is capitalised by grammar, not as a name
        if words:
            found.append(re.sub(r"'s$", "", " ".join(words)).rstrip(".'"))
    found += _NUMBER.findall(unquoted)
    if evidence:
        found += _quoted(evidence)
    unique: list[str] = []
    for literal in found:
        if literal and literal.lower() not in (u.lower() for u in unique):
            unique.append(literal)
    return unique


def _contains_word(text: str, literal: str) -> bool:
    """The literal as a whole word or phrase (so "S" is not seen inside "tables")."""
    return re.search(rf"(?<!\w){re.escape(literal)}(?!\w)", text) is not None


def episode_metrics(trace: EpisodeTrace, question: str, evidence: str | None = None) -> dict:
    """tables_touched, literals (each with whether a tool output showed it) and the share seen."""
    tables: list[str] = []
    outputs: list[str] = []
    for round_ in trace.rounds:
        for call in round_.calls:
            tables += [t for t in call.tables if t not in tables]
            if call.tool != "submit_sql":
                outputs.append(call.output.lower())
    literals = question_literals(question, evidence)
    seen = {literal: any(_contains_word(out, literal.lower()) for out in outputs) for literal in literals}
    share = sum(seen.values()) / len(seen) if seen else None
    return {"tables_touched": tables, "literals_seen": seen, "literals_seen_share": share}

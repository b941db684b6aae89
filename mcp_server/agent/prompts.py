"""The agent's system prompt and user template, and how they are read from a model's `sqale_agent.py`."""

from __future__ import annotations

import ast
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REFERENCE_LOOP_FILE = "sqale_agent.py"

SYSTEM_PROMPT = """You are an expert SQLite analyst. Answer the user's question with one SQLite query.
You cannot see the database schema: explore the database with the tools below, then write the query.

Tools (call them with JSON, arguments as shown):
- list_tables: {} -> every table name
- describe_table: {"table_name": "..."} -> the table's CREATE TABLE statement
- foreign_keys: {"table_name": "..."} -> the table's foreign-key relations
- join_path: {"table_a": "...", "table_b": "..."} -> a path of tables along foreign keys
- sample_rows: {"table_name": "...", "limit": 5} -> a few rows of the table
- distinct_values: {"table_name": "...", "column_name": "...", "limit": 20} -> distinct values of a column
- run_query: {"sql": "..."} -> the first rows of a read-only SQLite query, or its error
- submit_sql: {"sql": "..."} -> submit your final SQLite query and end the task

Execution plan:
1. Find the tables the question needs (list_tables, describe_table).
2. Learn how they connect (foreign_keys, join_path).
3. Check the values the question mentions (distinct_values, sample_rows).
4. Build the query step by step and test it with run_query.
5. Submit the query that answers the question with submit_sql.

Reply format: think inside <think></think> first, then write one tool call as a bare JSON object:
{"tool": "<tool name>", "args": {<arguments>}}
You have a limited number of tool turns; when they run out, answer with the SQL query only."""

USER_TEMPLATE = "Question: {question}"

EVIDENCE_TEMPLATE = "\nEvidence: {evidence}"


@dataclass(frozen=True)
class Prompts:
    """The two strings an episode starts from."""

    system: str = SYSTEM_PROMPT
    user_template: str = USER_TEMPLATE

    def user_message(self, question: str, evidence: str | None = None) -> str:
        """The first user turn: the question and, when given, its evidence note."""
        template = self.user_template
        if evidence and "{evidence}" not in template:
            template += EVIDENCE_TEMPLATE
        fields = _Fields(question=question, evidence=evidence or "")
        try:
            return template.format_map(fields)  # as the reference loop's str.format does, `{{` included
        except (ValueError, IndexError):
            # A lone brace (a JSON example written without doubling) is not a format string: replace plainly.
            return template.replace("{question}", question).replace("{evidence}", evidence or "")


class _Fields(dict):
    """Format fields that leave unknown placeholders as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def read_reference_prompts(path: Path) -> dict[str, str]:
    """Module-level literal string assignments of a Python file, parsed with `ast` and never executed."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        # Implicit concatenation ("a" "b", also parenthesised) parses as one Constant.
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = value.value
    return found


def load_prompts(model_dir: str | Path | None) -> Prompts:
    """The model's own prompts when its directory ships the reference loop, else our defaults."""
    if model_dir is None:
        return Prompts()
    path = Path(model_dir) / REFERENCE_LOOP_FILE
    if not path.is_file():
        return Prompts()
    try:
        constants = read_reference_prompts(path)
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        log.warning("could not parse %s (%s); using the built-in prompts", path, exc)
        return Prompts()
    system, user = constants.get("SYSTEM_PROMPT"), constants.get("USER_TEMPLATE")
    if system is None or user is None:
        log.warning(
            "%s has no literal SYSTEM_PROMPT and USER_TEMPLATE strings; using the built-in prompts", path
        )
        return Prompts()
    if "{question}" not in user:
        log.warning("USER_TEMPLATE in %s has no {question} field; using the built-in prompts", path)
        return Prompts()
    log.info("using the prompts of %s", path)
    return Prompts(system=system, user_template=user)

"""The episode loop on real SQLite and PostgreSQL databases, driven by scripted replies: the exact text the
model would see after each round, the round and failure limits, and how episodes end."""

from __future__ import annotations

import json

import pytest

from mcp_server.agent import Agent, AgentConfig
from mcp_server.agent.policies.replay import ReplayPolicy
from model.serving.cancel import CancelEvent, Cancelled

QUESTION = "Which employees work in Sales?"
HEADER = "<|im_end|>\n<|im_start|>assistant\n<think>\n"
LIST = '{"tool": "list_tables", "args": {}}'
SALES_SQL = "SELECT e.name FROM employees e JOIN departments d ON d.id = e.dept_id WHERE d.name = 'Sales' ORDER BY e.id"
SALES_CALL = json.dumps({"tool": "run_query", "args": {"sql": SALES_SQL}})
SALES_OUTPUT = "name\nAda\nBo\nFlo"
# list_tables on the fixture database: SQLite lists the tables in the order they were made, PostgreSQL by name.
TABLES = {
    "sqlite": "users, aler, AlertLogs, countries, customers, products, orders, order_items, weird name, big_text, "
    "empty_table, departments, employees (13 tables)",
    "postgres": "AlertLogs, aler, big_text, countries, customers, departments, employees, empty_table, order_items, "
    "orders, products, users, weird name, sales.invoices (14 tables)",
}
FORCED = (
    "You have reached the exploration limit. Now generate the final SQL query to answer the question. "
    "Return only the SQL query."
)


def ask(db, tokenizer, scripts, question=QUESTION, **config):
    policy = ReplayPolicy.with_tokenizer(scripts, tokenizer)
    answer = Agent(db, policy, AgentConfig(**config)).ask(question)
    return answer, policy.runs[0].prompts_seen


def user_turn(content: str) -> str:
    """What follows a reply: end of turn, the user turn, the next assistant header."""
    return f"<|im_end|>\n<|im_start|>user\n{content}{HEADER}"


def test_prompt_text_grows_by_each_round(db, tokenizer):
    replies = [
        f"I need the tables.</think>\n{LIST}\n```json\n{SALES_CALL}\n```",
        "Let me think about it. No call here.",
        f'Done.</think>\n{{"tool": "submit_sql", "args": {{"sql": "{SALES_SQL}"}}}}',
    ]
    answer, seen = ask(db, tokenizer, [replies])
    first, second, third = seen[0]
    assert first.startswith("<|im_start|>system\nYou are an expert SQLite analyst.")
    assert first.endswith(
        f"<|im_start|>user\nQuestion: {QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    assert "departments" not in first and "salary" not in first  # the schema is never in the prompt
    results = (
        f"{LIST}\n{TABLES[db.dialect]}\n\n{SALES_CALL}\n{SALES_OUTPUT}\n\n"
        "[5 tool turns left before you must answer]"
    )
    assert second == first + replies[0] + user_turn(results)
    reminder = (
        'Your reply had no tool call. After </think>, write a tool call as a bare JSON object {"tool": '
        '"<tool name>", "args": {...}}, or submit your final query with submit_sql.\n\n'
        "[4 tool turns left before you must answer]"
    )
    assert third == second + replies[1] + user_turn(reminder)
    assert answer.ending == "submit_sql"
    assert answer.to_dict()["rows"] == [["Ada"], ["Bo"], ["Flo"]]
    rounds = answer.to_dict()["trace"]["rounds"]
    assert [len(r["calls"]) for r in rounds] == [2, 0, 1]
    assert rounds[0]["reasoning"] == "I need the tables."
    assert rounds[0]["calls"][1]["tables"] == ["employees", "departments"]
    assert rounds[1]["reasoning"] == "Let me think about it. No call here." and rounds[1]["reply"] == ""


def test_budget_lines_count_down_to_the_forced_answer(db, tokenizer):
    call = '</think>\n{"tool": "run_query", "args": {"sql": "SELECT COUNT(*) AS n FROM departments"}}'
    replies = [call] * 6 + ["</think>\n```sql\nSELECT name FROM departments ORDER BY id\n```"]
    answer, seen = ask(db, tokenizer, [replies])
    assert len(seen[0]) == 7
    for round_index, prompt in enumerate(seen[0][1:6], start=1):
        left = 6 - round_index
        line = f"[{left} tool {'turn' if left == 1 else 'turns'} left before you must answer]"
        assert prompt.endswith(f"\nn\n3\n\n{line}{HEADER}")
    forced = (
        f"{FORCED} Your last query that executed without error was:\nSELECT COUNT(*) AS n FROM departments\n"
        "If you are not sure of an improvement, return that query."
    )
    assert seen[0][6].endswith(f"n\n3\n\n{forced}{HEADER}")
    assert answer.ending == "forced_answer"
    assert answer.to_dict()["rows"] == [["Sales"], ["Research"], ["Support"]]
    assert answer.chosen.trace.limit == "rounds"


def test_forced_answer_without_a_good_query_and_an_empty_answer_has_no_sql(db, tokenizer):
    replies = ["</think>\n" + LIST] * 6 + [""]
    answer, seen = ask(db, tokenizer, [replies])
    assert seen[0][6].endswith(f"{TABLES[db.dialect]}\n\n{FORCED}{HEADER}")
    assert answer.ending == "no_sql"
    assert answer.sql is None and answer.to_dict()["rows"] == []


def test_broken_final_answer_falls_back_to_the_last_good_query(db, tokenizer):
    good = '</think>\n{"tool": "run_query", "args": {"sql": "SELECT id FROM departments WHERE city IS NULL"}}'
    bad = '</think>\n{"tool": "run_query", "args": {"sql": "SELECT nope FROM departments"}}'
    replies = [good, bad, bad, LIST, LIST, LIST, "</think>\nSELECT broken FROM nowhere_at_all"]
    answer, _ = ask(db, tokenizer, [replies], max_rounds=6)
    assert answer.ending == "fallback"
    assert answer.to_dict()["rows"] == [[3]]
    assert answer.chosen.trace.final_sql_source == "SELECT broken FROM nowhere_at_all"
    assert answer.chosen.trace.final_db_ms > 0


def test_four_failed_queries_in_a_row_end_exploration(db, tokenizer):
    fail = '{"tool": "run_query", "args": {"sql": "SELECT missing_column FROM employees"}}'
    ok = '{"tool": "run_query", "args": {"sql": "SELECT 1 AS one"}}'
    replies = [
        # A success resets the count: fail, ok, then three failures and a list_tables (not a query).
        f"</think>\n{fail}\n{ok}\n{fail}\n{fail}\n{LIST}\n{fail}",
        # The fourth failure in a row stops the round: the list_tables after it never runs.
        f"</think>\n{fail}\n{LIST}",
        "</think>\nSELECT 1 AS one",
    ]
    answer, seen = ask(db, tokenizer, [replies])
    rounds = answer.chosen.trace.rounds
    assert [c.tool for c in rounds[0].calls] == ["run_query"] * 4 + ["list_tables", "run_query"]
    assert [c.tool for c in rounds[1].calls] == ["run_query"]
    assert answer.chosen.trace.limit == "failed_queries"
    assert rounds[1].calls[0].error and "missing_column" in rounds[1].calls[0].output
    assert seen[0][2].endswith(
        f"Your last query that executed without error was:\nSELECT 1 AS one\n"
        f"If you are not sure of an improvement, return that query.{HEADER}"
    )
    assert answer.ending == "forced_answer" and answer.to_dict()["rows"] == [[1]]


def test_malformed_replies_cost_their_round(db, tokenizer):
    replies = [
        '</think>\n{"tool": "run_query", "args": {"sql": "SELECT name FROM departments',  # cut mid-call
        "",  # empty
        f"Maybe {LIST} first?</think>\nI am not sure yet.",  # a call while thinking is not an action
        "</think>\n{'tool': 'run_query', 'args': {'sql': 'SELECT COUNT(*) AS n FROM employees',},}",
        "</think>\n" + '{"tool": "submit_sql", "args": {"sql": "SELECT COUNT(*) AS n FROM employees"}}',
    ]
    answer, seen = ask(db, tokenizer, [replies])
    rounds = answer.chosen.trace.rounds
    assert [len(r.calls) for r in rounds] == [0, 0, 0, 1, 1]
    assert rounds[0].malformed_calls == 1
    for prompt, left in zip(seen[0][1:4], (5, 4, 3), strict=True):
        assert prompt.endswith(
            f"submit your final query with submit_sql.\n\n[{left} tool turns left before you "
            f"must answer]{HEADER}"
        )
    assert seen[0][4].endswith("\nn\n7\n\n[2 tool turns left before you must answer]" + HEADER)
    assert answer.ending == "submit_sql" and answer.to_dict()["rows"] == [[7]]


def test_plain_sql_reply_is_the_final_answer(db, tokenizer):
    replies = ["The query is:</think>\nSELECT name FROM departments WHERE city = 'Denver';\nThat is all."]
    answer, seen = ask(db, tokenizer, [replies])
    assert len(seen[0]) == 1
    assert answer.ending == "answer" and answer.to_dict()["rows"] == [["Research"]]


def test_failing_submission_falls_back_and_unknown_tools_are_reported(db, tokenizer):
    replies = [
        '</think>\n{"tool": "drop_everything", "args": {}}\n'
        '{"tool": "run_query", "args": {"sql": "SELECT COUNT(*) AS n FROM departments"}}',
        '</think>\n{"tool": "submit_sql", "args": {"sql": "DELETE FROM employees"}}',
    ]
    answer, seen = ask(db, tokenizer, [replies])
    unknown = answer.chosen.trace.rounds[0].calls[0]
    assert unknown.error and "unknown tool" in unknown.output and "list_tables" in unknown.output
    assert answer.ending == "fallback" and answer.to_dict()["rows"] == [[3]]
    assert db.query("SELECT COUNT(*) AS n FROM employees").rows[0][0] == 7


def test_token_budget_ends_the_episode_cleanly(db, tokenizer):
    prompt_tokens = ask(db, tokenizer, [["</think>\nSELECT 1 AS one"]])[0].chosen.trace.prompt_tokens
    long_thought = "Let me consider every table carefully. " * 200
    budget = prompt_tokens + 400
    good = '</think>\n{"tool": "run_query", "args": {"sql": "SELECT 2 AS two"}}'
    answer, seen = ask(db, tokenizer, [[good, long_thought, long_thought]], token_budget=budget)
    trace = answer.chosen.trace
    assert trace.length <= budget
    assert trace.rounds[1].stopped is False  # the long reply was cut at what the budget left
    assert trace.limit == "tokens"
    assert answer.ending == "fallback" and answer.to_dict()["rows"] == [[2]]
    assert len(tokenizer.encode(seen[0][-1])) <= budget


def test_samples_vote_on_result_sets(db, tokenizer):
    def submit(sql):
        return "</think>\n" + json.dumps({"tool": "submit_sql", "args": {"sql": sql}})

    scripts = [
        [submit("SELECT name FROM departments WHERE city IS NOT NULL")],
        [submit("SELECT COUNT(*) AS n FROM departments")],
        [submit("SELECT name FROM departments WHERE name <> 'Support' ORDER BY name DESC")],
        ["</think>\nno idea"] * 7,
    ]
    policy = ReplayPolicy.with_tokenizer(scripts, tokenizer)
    answer = Agent(db, policy, AgentConfig(samples=4)).ask(QUESTION)
    votes = answer.to_dict()["votes"]
    assert [(v["count"], v["episodes"], v["result"]) for v in votes] == [
        (2, [0, 2], True),
        (1, [1], True),
        (1, [3], False),
    ]
    assert answer.chosen.sql_sqlite == "SELECT name FROM departments WHERE city IS NOT NULL"
    assert sorted(answer.to_dict()["rows"]) == [["Research"], ["Sales"]]
    assert [e.ending for e in answer.episodes] == ["submit_sql", "submit_sql", "submit_sql", "no_sql"]


def test_progress_and_cancellation(db, tokenizer):
    events = []
    cancel = CancelEvent()

    def on_round(event):
        events.append(event)
        if event.round == 2:
            cancel.set()

    policy = ReplayPolicy.with_tokenizer([[f"</think>\n{LIST}\n{LIST}"] * 6], tokenizer)
    with pytest.raises(Cancelled):
        Agent(db, policy, AgentConfig()).ask(QUESTION, on_round=on_round, cancel=cancel)
    assert [(e.round, e.max_rounds, e.calls) for e in events] == [
        (1, 7, ("list_tables", "list_tables")),
        (2, 7, ("list_tables", "list_tables")),
    ]


def test_evidence_goes_into_the_user_turn_and_literals_are_tracked(db, tokenizer):
    replies = [
        '</think>\n{"tool": "distinct_values", "args": {"table_name": "departments", "column_name": "city"}}',
        "</think>\nSELECT COUNT(*) AS n FROM departments WHERE city = 'Boston'",
    ]
    policy = ReplayPolicy.with_tokenizer([replies], tokenizer)
    answer = Agent(db, policy).ask("How many departments are in Boston or Austin?", "a city is 'Boston'")
    assert (
        "Question: How many departments are in Boston or Austin?\nEvidence: a city is 'Boston'<|im_end|>"
        in (policy.runs[0].prompts_seen[0][0])
    )
    metrics = answer.to_dict()["metrics"]
    assert metrics["literals_seen"] == {"Boston": True, "Austin": False}
    assert metrics["tables_touched"] == ["departments"]


# How each dialect writes SQLite's GROUP_CONCAT.
STRING_AGGREGATE = {"postgres": "STRING_AGG", "mysql": "GROUP_CONCAT", "duckdb": "LISTAGG"}


def test_other_dialects_run_transpiled_sql_and_keep_both(other_dialect_db, tokenizer):
    sqlite_sql = (
        "SELECT IFNULL(city, 'none') AS city, SUBSTR(name, 1, 2) AS code FROM departments ORDER BY id"
    )
    final = "SELECT GROUP_CONCAT(name, '+') AS names FROM departments WHERE IIF(city IS NULL, 0, 1) = 1"
    replies = [
        "</think>\n" + json.dumps({"tool": "run_query", "args": {"sql": sqlite_sql}}),
        "</think>\n" + json.dumps({"tool": "submit_sql", "args": {"sql": final}}),
    ]
    answer, seen = ask(other_dialect_db, tokenizer, [replies])
    call = answer.chosen.trace.rounds[0].calls[0]
    assert call.error is None and call.sql == sqlite_sql
    assert "COALESCE" in call.executed_sql and "IFNULL" not in call.executed_sql
    assert call.output == "city | code\nBoston | Sa\nDenver | Re\nnone | Su"
    assert json.dumps(sqlite_sql) in seen[0][1]  # the model sees its own SQL echoed, not the transpiled one
    result = answer.to_dict()
    dialect = other_dialect_db.dialect
    assert result["sql_dialect"] == dialect and result["sql_sqlite"] == final
    assert STRING_AGGREGATE[dialect] in result["sql"] and result["ending"] == "submit_sql"
    assert sorted(result["rows"][0][0].split("+")) == ["Research", "Sales"]


def test_a_last_round_without_a_call_gets_the_forced_answer_alone(db, tokenizer):
    ok = '</think>\n{"tool": "run_query", "args": {"sql": "SELECT 1 AS one"}}'
    replies = [ok] * 5 + ["</think>\nI am not sure yet.", "</think>\nSELECT 1 AS one"]
    answer, seen = ask(db, tokenizer, [replies])
    forced = (
        f"{FORCED} Your last query that executed without error was:\nSELECT 1 AS one\n"
        "If you are not sure of an improvement, return that query."
    )
    assert seen[0][6] == seen[0][5] + replies[5] + user_turn(forced)
    assert answer.ending == "forced_answer" and answer.chosen.trace.limit == "rounds"


def test_a_final_answer_written_as_a_call_is_read_from_its_json(db, tokenizer):
    # The raw text keeps the JSON escape (`\u0061` for `a`); only the decoded call holds the SQL as meant.
    sql = "SELECT id FROM departments WHERE name = 'S\\u0061les';"
    final = '</think>\n{"tool": "submit_sql", "args": {"sql": "' + sql + '"}}'
    answer, _ = ask(db, tokenizer, [["</think>\n" + LIST] * 6 + [final]])
    assert answer.ending == "forced_answer"
    assert answer.chosen.sql_sqlite == "SELECT id FROM departments WHERE name = 'Sales';"
    assert answer.to_dict()["rows"] == [[1]]

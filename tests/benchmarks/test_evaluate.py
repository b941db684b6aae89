"""The evaluation harness end to end over the hand-written demo question set."""

import json
import sqlite3

import pytest

from benchmarks.eval.datasets import load_questions
from benchmarks.eval.evaluate import main, parse_args
from dbtools.engines import open_database
from tests.benchmarks.dataset_files import (
    OTHER_SCHEMA,
    PHRASINGS,
    QUESTIONS,
    SCHEMA,
    bird_folder,
    write_parquet,
)
from tests.usage_errors import usage_error

DEMO = load_questions("plain")


def _reply(*calls, thought="Let me look."):
    return thought + "\n</think>\n\n" + "\n".join(json.dumps({"tool": t, "args": a}) for t, a in calls)


def _write_scripts(path, scripts):
    with path.open("w") as out:
        for question_id, replies in scripts.items():
            out.write(json.dumps({"question_id": question_id, "replies": replies}) + "\n")
    return path


def _run(tmp_path, *args):
    out = tmp_path / "report.json"
    assert main([*map(str, args), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    episodes = [json.loads(line) for line in (tmp_path / "report.episodes.jsonl").read_text().splitlines()]
    return report, episodes


# Slow (left out of the fast tier): every gold query on the full demo database.
@pytest.mark.slow
def test_every_gold_query_of_the_demo_set_returns_rows():
    assert len(DEMO) >= 15
    assert {q.difficulty for q in DEMO} == {"simple", "moderate", "challenging"}
    with open_database(None) as db:
        for question in DEMO:
            assert db.query(question.gold_sql).rows, question.question_id


def test_replayed_episodes_score_exactly_as_scripted(tmp_path, tokenizer_dir, capsys):
    scripts, expected_correct = {}, set()
    for index, question in enumerate(DEMO):
        if index % 3 == 0:
            final = "SELECT 'a wrong answer'"
        else:
            final = question.gold_sql
            expected_correct.add(question.question_id)
        scripts[question.question_id] = [
            _reply(("list_tables", {})),
            _reply(("submit_sql", {"sql": final}), thought="I have it."),
        ]
    # One episode looks at the data its literal lives in, and opens its gold table.
    scripts["demo-01"][0] = _reply(("run_query", {"sql": "SELECT DISTINCT continent FROM countries"}))
    replay = _write_scripts(tmp_path / "replay.jsonl", scripts)

    report, episodes = _run(tmp_path, "--model", tokenizer_dir, "--replay", replay)

    overall = report["overall"]
    assert overall["episodes"] == overall["scored"] == len(DEMO)
    assert overall["correct"] == len(expected_correct)
    assert overall["execution_accuracy"] == pytest.approx(len(expected_correct) / len(DEMO))
    assert {e["question_id"] for e in episodes if e["correct"]} == expected_correct
    assert overall["endings"] == {"submit_sql": len(DEMO)}
    assert overall["mean_rounds"] == 2 and overall["mean_tool_calls"] == 2
    for difficulty, summary in report["by_difficulty"].items():
        group = [e for e in episodes if e["difficulty"] == difficulty]
        assert summary["correct"] == sum(e["correct"] for e in group)

    by_id = {e["question_id"]: e for e in episodes}
    assert by_id["demo-01"]["opened_gold_tables"] is True
    assert by_id["demo-01"]["literals_seen"] == ["Europe"]
    assert by_id["demo-02"]["opened_gold_tables"] is False
    assert by_id["demo-02"]["gold_literals"] == ["cancelled"] and by_id["demo-02"]["literals_seen"] == []
    assert overall["opened_gold_tables"] == pytest.approx(1 / len(DEMO))
    assert all(e["tokens"]["prompt"] > 0 and e["tokens"]["generated"] > 0 for e in episodes)
    assert all(len(e["trace"]["rounds"]) == 2 for e in episodes)
    printed = capsys.readouterr().out
    assert "execution accuracy" in printed and "challenging" in printed


def test_a_failing_gold_query_is_reported_not_scored(tmp_path, tokenizer_dir):
    database = tmp_path / "toy.sqlite"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE toy (name TEXT)")
        conn.execute("INSERT INTO toy VALUES ('kite')")
    questions = tmp_path / "set.jsonl"
    questions.write_text(
        json.dumps(
            {
                "question_id": "ok",
                "question": "Toys?",
                "gold_sql": "SELECT name FROM toy",
                "database": "toy.sqlite",
            }
        )
        + "\n"
        + json.dumps(
            {
                "question_id": "broken",
                "question": "Toys?",
                "gold_sql": "SELECT nme FROM toy",
                "database": "toy.sqlite",
            }
        )
        + "\n"
    )
    submit = [_reply(("submit_sql", {"sql": "SELECT name FROM toy"}))]
    replay = _write_scripts(tmp_path / "replay.jsonl", {"ok": submit, "broken": submit})

    report, episodes = _run(tmp_path, "--questions", questions, "--model", tokenizer_dir, "--replay", replay)

    assert report["overall"]["scored"] == 1 and report["overall"]["gold_failures"] == 1
    assert report["overall"]["execution_accuracy"] == 1.0
    broken = next(e for e in episodes if e["question_id"] == "broken")
    assert broken["correct"] is None and "nme" in broken["gold_error"]


def test_replay_without_a_script_for_a_question_fails_before_running(tmp_path, tokenizer_dir, capsys):
    replay = _write_scripts(tmp_path / "replay.jsonl", {"demo-01": [_reply(("list_tables", {}))]})
    assert main(["--model", str(tokenizer_dir), "--replay", str(replay), "--limit", "2"]) == 2
    assert "demo-02" in capsys.readouterr().err


def test_without_a_model_the_error_says_how_to_configure_one(capsys, monkeypatch):
    for name in ("SQLSCOUT_MODEL", "SQLSCOUT_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--limit", "1"]) == 2
    assert "--model" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SQLSCOUT_EVAL_LIMIT", "ten", "argument --limit: invalid int value: 'ten'"),
        ("SQLSCOUT_EVAL_FORMAT", "csv", "argument --format: invalid choice: 'csv'"),
        ("SQLSCOUT_EVAL_LIMIT", "0", "--limit must be at least 1"),
    ],
)
def test_a_bad_environment_value_is_a_usage_error(variable, value, message, capsys, monkeypatch):
    monkeypatch.setenv(variable, value)
    assert message in usage_error(lambda: main([]), capsys)


def test_variables_set_the_options_and_flags_win(monkeypatch):
    monkeypatch.setenv("SQLSCOUT_EVAL_LIMIT", "3")
    monkeypatch.setenv("SQLSCOUT_EVAL_FORMAT", "bird")
    monkeypatch.setenv("SQLSCOUT_SAMPLES", "2")
    args = parse_args([])
    assert (args.limit, args.format, args.samples) == (3, "bird", 2)
    args = parse_args(["--limit", "1", "--format", "plain"])
    assert (args.limit, args.format, args.samples) == (1, "plain", 2)


# Slow (left out of the fast tier): episodes of a random model on the CPU.
@pytest.mark.slow
def test_tiny_random_model_episodes_end_cleanly(tmp_path, tiny_model_dir):
    report, episodes = _run(
        tmp_path,
        "--model",
        tiny_model_dir,
        "--device",
        "cpu",
        "--limit",
        "2",
        "--token-budget",
        "440",
        "--seed",
        "0",
    )
    assert report["overall"]["episodes"] == 2 and report["settings"]["policy"] == "local"
    for episode in episodes:
        assert episode["agent_error"] is None
        # The prompt takes most of the 440 tokens: after one reply neither another round nor the forced final
        # turn fits, and a random model's reply holds no runnable call, so no SQL comes and none can be correct.
        assert (episode["ending"], episode["trace"]["limit"], episode["rounds"]) == ("no_sql", "tokens", 1)
        assert (episode["predicted_sql"], episode["correct"]) == (None, False)
        assert 0 < episode["tokens"]["sequence"] <= 440
    first, second = episodes
    assert first["processed_tokens"] >= first["tokens"]["sequence"] - 1
    # The second question reuses the system turn's state: it runs only its own user turn and reply.
    assert 0 < second["processed_tokens"] < second["tokens"]["sequence"] - 1
    assert report["overall"]["endings"] == {"no_sql": 2}
    processed = [e["processed_tokens"] for e in episodes]
    assert report["overall"]["mean_processed_tokens"] == pytest.approx(sum(processed) / len(processed))


@pytest.mark.postgres
def test_questions_on_postgresql_are_scored_in_its_dialect(tmp_path, tokenizer_dir, pg_server_dsn):
    import uuid

    import psycopg

    name = f"sqlscout_eval_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE toy (name TEXT, price NUMERIC(8, 2), added DATE)")
        conn.execute("INSERT INTO toy VALUES ('kite', 3.50, '2024-03-01'), ('yoyo', 1.25, '2024-05-02')")
    records = [
        {
            "question_id": "sum",
            "question": "Total price?",
            "gold_sql": "SELECT SUM(price) FROM toy",
            "database": dsn,
        },
        {
            "question_id": "when",
            "question": "When was the kite added?",
            "gold_sql": "SELECT added FROM toy WHERE name = 'kite'",
            "database": dsn,
        },
    ]
    questions = tmp_path / "set.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in records))
    # The model writes SQLite; the agent runs it in PostgreSQL's dialect (IFNULL becomes COALESCE).
    replay = _write_scripts(
        tmp_path / "replay.jsonl",
        {
            "sum": [_reply(("submit_sql", {"sql": "SELECT IFNULL(SUM(price), 0) FROM toy"}))],
            "when": [_reply(("submit_sql", {"sql": "SELECT added FROM toy WHERE name = 'yoyo'"}))],
        },
    )

    report, episodes = _run(tmp_path, "--questions", questions, "--model", tokenizer_dir, "--replay", replay)

    by_id = {e["question_id"]: e for e in episodes}
    assert by_id["sum"]["correct"] is True and "COALESCE" in by_id["sum"]["predicted_sql"].upper()
    assert by_id["when"]["correct"] is False
    assert report["overall"]["execution_accuracy"] == 0.5


def test_sqale_records_end_to_end(tmp_path, tokenizer_dir):
    # The second record's execution_result disagrees with its database: reported, the question still scored.
    records = [QUESTIONS[0], {**QUESTIONS[1], "execution_result": "[[30.0]]"}]
    questions = write_parquet(tmp_path / "queries.parquet", records)
    schemas = write_parquet(tmp_path / "schemas.parquet", [SCHEMA, OTHER_SCHEMA], ("schema_content",))
    replay = _write_scripts(
        tmp_path / "replay.jsonl",
        {
            "1": [
                _reply(("run_query", {"sql": "SELECT DISTINCT city FROM customers"})),
                _reply(("submit_sql", {"sql": "SELECT name FROM customers WHERE city = 'Lisbon'"})),
            ],
            "2": [_reply(("submit_sql", {"sql": "SELECT SUM(total) FROM orders WHERE id = 10"}))],
        },
    )

    report, episodes = _run(
        tmp_path,
        "--format",
        "sqale",
        "--questions",
        questions,
        "--schemas",
        schemas,
        "--cache-dir",
        tmp_path / "cache",
        "--phrasing",
        "evidence_supported",
        "--model",
        tokenizer_dir,
        "--replay",
        replay,
    )

    assert [e["question"] for e in episodes] == [
        PHRASINGS["evidence_supported"],
        QUESTIONS[1]["questions"]["evidence_supported"],
    ]
    assert [e["correct"] for e in episodes] == [True, False]
    assert report["by_difficulty"]["easy"]["execution_accuracy"] == 1.0
    assert report["by_difficulty"]["medium"]["execution_accuracy"] == 0.0
    assert episodes[0]["literals_seen"] == ["Lisbon"] and episodes[0]["opened_gold_tables"] is True
    assert report["settings"]["phrasing"] == "evidence_supported"
    assert [e["gold_matches_recorded"] for e in episodes] == [True, False]
    assert report["overall"]["gold_differs_from_recorded"] == 1 and report["overall"]["scored"] == 2


def test_bird_dev_folder_end_to_end(tmp_path, tokenizer_dir):
    dev = bird_folder(tmp_path)
    replay = _write_scripts(
        tmp_path / "replay.jsonl",
        {
            "0": [
                _reply(
                    ("submit_sql", {"sql": "SELECT name FROM toy WHERE price = (SELECT MIN(price) FROM toy)"})
                )
            ],
            "1": [_reply(("submit_sql", {"sql": "SELECT COUNT(name) FROM toy"}))],
        },
    )

    report, episodes = _run(
        tmp_path, "--format", "bird", "--questions", dev, "--model", tokenizer_dir, "--replay", replay
    )

    assert [e["correct"] for e in episodes] == [True, True]
    assert episodes[0]["evidence"] == "cheapest refers to MIN(price)"
    assert set(report["by_difficulty"]) == {"simple", "moderate"}


def test_samples_vote_on_their_results(tmp_path, tokenizer_dir):
    first = DEMO[0]
    replay = tmp_path / "replay.jsonl"
    samples = [
        [_reply(("submit_sql", {"sql": first.gold_sql}))],
        [_reply(("submit_sql", {"sql": "SELECT 0"}))],
        [_reply(("submit_sql", {"sql": first.gold_sql + " AND 1 = 1"}))],
    ]
    replay.write_text(json.dumps({"question_id": first.question_id, "samples": samples}) + "\n")

    report, episodes = _run(
        tmp_path, "--model", tokenizer_dir, "--replay", replay, "--limit", "1", "--samples", "3"
    )

    assert episodes[0]["correct"] is True
    assert [vote["count"] for vote in episodes[0]["votes"]] == [2, 1]
    assert report["settings"]["samples"] == 3

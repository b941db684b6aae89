"""Each question-set format loads from small files written here, with its databases usable for scoring."""

import json
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.datasets import load_questions

SCHEMA = {
    "schema_id": "shop_7",
    "full_schema": (
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);\n"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL, note TEXT, "
        "FOREIGN KEY (customer_id) REFERENCES customers(id));\n"
        "CREATE TABLE empty_table (id INTEGER);"
    ),
    "schema_content": {
        "customers": [
            {"id": 1, "name": "Ana; Lda", "city": "Lisbon"},
            {"id": 2, "name": "Bo", "city": "Oslo"},
        ],
        "orders": [
            {"id": 10, "customer_id": 1, "total": 9.5, "note": {"gift": True}},
            {"id": 11, "customer_id": 2, "total": 20.0, "note": None},
        ],
    },
}
OTHER_SCHEMA = {"schema_id": "unused", "full_schema": "CREATE TABLE x (a INT);", "schema_content": {}}
PHRASINGS = {"verbose": "Which customers live in Lisbon, by name?", "evidence_supported": "Names in Lisbon?"}
QUESTIONS = [
    {
        "question_id": 1,
        "schema_id": "shop_7",
        "sql": "SELECT name FROM customers WHERE city = 'Lisbon'",
        "difficulty": "easy",
        "questions": PHRASINGS,
        "relevant_tables": ["customers"],
        "execution_result": "[['Ana; Lda']]",
    },
    {
        "question_id": 2,
        "schema_id": "shop_7",
        "sql": "SELECT SUM(total) FROM orders",
        "difficulty": "medium",
        "questions": {"verbose": "What is the total of all orders?"},
        "relevant_tables": ["orders"],
        "execution_result": "[[29.5]]",
    },
]


def _write_jsonl(path, records, encode_json_fields=()):
    with path.open("w") as out:
        for record in records:
            record = {k: json.dumps(v) if k in encode_json_fields else v for k, v in record.items()}
            out.write(json.dumps(record) + "\n")
    return path


def _write_parquet(path, records, encode_json_fields=()):
    rows = [{k: json.dumps(v) if k in encode_json_fields else v for k, v in r.items()} for r in records]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("writer", [_write_jsonl, _write_parquet])
def test_sqale_records_build_databases_once(tmp_path, writer):
    suffix = "parquet" if writer is _write_parquet else "jsonl"
    questions = writer(tmp_path / f"queries.{suffix}", QUESTIONS, ("questions",))
    schemas = writer(tmp_path / f"schemas.{suffix}", [SCHEMA, OTHER_SCHEMA], ("schema_content",))
    cache = tmp_path / "cache"
    loaded = load_questions("sqale", questions, schemas=schemas, cache_dir=cache)

    assert [q.question_id for q in loaded] == ["1", "2"]
    assert loaded[0].question == PHRASINGS["verbose"]
    assert [q.difficulty for q in loaded] == ["easy", "medium"]
    assert loaded[0].database == loaded[1].database
    assert len(list(cache.iterdir())) == 1, "one database per schema_id, none for unused schemas"
    with sqlite3.connect(loaded[0].database) as conn:
        assert conn.execute(loaded[0].gold_sql).fetchall() == [("Ana; Lda",)]
        assert conn.execute(loaded[1].gold_sql).fetchall() == [(29.5,)]
        assert conn.execute("SELECT note FROM orders WHERE id = 10").fetchone() == ('{"gift": true}',)
        assert conn.execute("SELECT COUNT(*) FROM empty_table").fetchone() == (0,)

    built = (cache / next(cache.iterdir()).name).stat().st_mtime_ns
    load_questions("sqale", questions, schemas=schemas, cache_dir=cache)
    assert (cache / next(cache.iterdir()).name).stat().st_mtime_ns == built, "cached database reused"


def test_sqale_phrasing_is_selectable_and_unknown_phrasing_names_the_choices(tmp_path):
    questions = _write_jsonl(tmp_path / "q.jsonl", QUESTIONS[:1])
    schemas = _write_jsonl(tmp_path / "s.jsonl", [SCHEMA])
    loaded = load_questions(
        "sqale", questions, schemas=schemas, cache_dir=tmp_path, phrasing="evidence_supported"
    )
    assert loaded[0].question == PHRASINGS["evidence_supported"]
    with pytest.raises(ValueError, match="evidence_supported, verbose"):
        load_questions("sqale", questions, schemas=schemas, cache_dir=tmp_path, phrasing="terse")


def test_sqale_missing_schema_is_reported(tmp_path):
    questions = _write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    schemas = _write_jsonl(tmp_path / "s.jsonl", [OTHER_SCHEMA])
    with pytest.raises(ValueError, match="shop_7"):
        load_questions("sqale", questions, schemas=schemas, cache_dir=tmp_path)


def test_sqale_limit_reads_only_the_first_questions(tmp_path):
    questions = _write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    schemas = _write_jsonl(tmp_path / "s.jsonl", [SCHEMA])
    assert len(load_questions("sqale", questions, schemas=schemas, cache_dir=tmp_path, limit=1)) == 1


def _bird_folder(tmp_path):
    db_dir = tmp_path / "dev_databases" / "toys"
    db_dir.mkdir(parents=True)
    with sqlite3.connect(db_dir / "toys.sqlite") as conn:
        conn.execute("CREATE TABLE toy (name TEXT, price REAL)")
        conn.executemany("INSERT INTO toy VALUES (?, ?)", [("kite", 3.0), ("yoyo", 1.5)])
    entries = [
        {
            "question_id": 0,
            "db_id": "toys",
            "question": "Cheapest toy?",
            "evidence": "cheapest refers to MIN(price)",
            "SQL": "SELECT name FROM toy ORDER BY price LIMIT 1",
            "difficulty": "simple",
        },
        {
            "question_id": 1,
            "db_id": "toys",
            "question": "How many toys?",
            "evidence": "",
            "SQL": "SELECT COUNT(*) FROM toy",
            "difficulty": "moderate",
        },
    ]
    (tmp_path / "dev.json").write_text(json.dumps(entries))
    return tmp_path / "dev.json"


def test_bird_dev_folder(tmp_path):
    loaded = load_questions("bird", _bird_folder(tmp_path))
    assert [q.difficulty for q in loaded] == ["simple", "moderate"]
    assert loaded[0].evidence == "cheapest refers to MIN(price)" and loaded[1].evidence is None
    with sqlite3.connect(loaded[0].database) as conn:
        assert conn.execute(loaded[0].gold_sql).fetchall() == [("yoyo",)]
    assert len(load_questions("bird", tmp_path / "dev.json", limit=1)) == 1


def test_bird_missing_database_names_the_path(tmp_path):
    dev = _bird_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="db-root"):
        load_questions("bird", dev, db_root=tmp_path / "elsewhere")


def test_plain_jsonl_resolves_relative_databases(tmp_path):
    (tmp_path / "dbs").mkdir()
    sqlite3.connect(tmp_path / "dbs" / "a.sqlite").close()
    records = [
        {"question": "q1", "gold_sql": "SELECT 1", "database": "dbs/a.sqlite", "difficulty": "hard"},
        {"question": "q2", "evidence": "e", "gold_sql": "SELECT 2", "database": "postgresql://u@h/db"},
        {"question": "q3", "gold_sql": "SELECT 3"},
    ]
    loaded = load_questions("plain", _write_jsonl(tmp_path / "set.jsonl", records))
    assert loaded[0].database == str(tmp_path / "dbs" / "a.sqlite")
    assert loaded[1].database == "postgresql://u@h/db" and loaded[1].evidence == "e"
    assert loaded[2].database is None and loaded[2].difficulty == "unknown"


def test_plain_record_without_gold_sql_is_rejected(tmp_path):
    path = _write_jsonl(tmp_path / "set.jsonl", [{"question": "q"}])
    with pytest.raises(ValueError, match="gold_sql"):
        load_questions("plain", path)


def test_unknown_format_lists_the_formats():
    with pytest.raises(ValueError, match="plain, sqale, bird"):
        load_questions("spider", "x")

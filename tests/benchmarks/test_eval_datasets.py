"""Each question-set format loads from small files written here, with its databases usable for scoring."""

import sqlite3
from pathlib import Path

import pytest

from benchmarks.eval.datasets import load_questions
from tests.benchmarks.dataset_files import (
    OTHER_SCHEMA,
    PHRASINGS,
    QUESTIONS,
    SCHEMA,
    bird_folder,
    write_jsonl,
    write_parquet,
)


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_sqale_records_build_databases_once(tmp_path, writer):
    suffix = "parquet" if writer is write_parquet else "jsonl"
    questions = writer(tmp_path / f"queries.{suffix}", QUESTIONS, ("questions",))
    schemas = writer(tmp_path / f"schemas.{suffix}", [SCHEMA, OTHER_SCHEMA], ("schema_content",))
    cache = tmp_path / "cache"
    loaded = load_questions("sqale", questions, schemas=schemas, cache_dir=cache)

    assert [q.question_id for q in loaded] == ["1", "2"]
    assert loaded[0].question == PHRASINGS["verbose"]
    assert [q.recorded_rows for q in loaded] == [(("Ana; Lda",),), ((29.5,),)]
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


def test_sqale_databases_go_to_the_cache_directory_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path / "cache"))
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS[:1])
    schemas = write_jsonl(tmp_path / "s.jsonl", [SCHEMA], ("schema_content",))
    (loaded,) = load_questions("sqale", questions, schemas=schemas)
    assert Path(loaded.database).parent == tmp_path / "cache" / "sqale"


def test_sqale_phrasing_is_selectable_and_unknown_phrasing_names_the_choices(tmp_path):
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS[:1])
    schemas = write_jsonl(tmp_path / "s.jsonl", [SCHEMA])
    loaded = load_questions(
        "sqale", questions, schemas=schemas, cache_dir=tmp_path, phrasing="evidence_supported"
    )
    assert loaded[0].question == PHRASINGS["evidence_supported"]
    with pytest.raises(ValueError, match="evidence_supported, verbose"):
        load_questions("sqale", questions, schemas=schemas, cache_dir=tmp_path, phrasing="terse")


def test_sqale_missing_schema_is_reported(tmp_path):
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    schemas = write_jsonl(tmp_path / "s.jsonl", [OTHER_SCHEMA])
    with pytest.raises(ValueError, match="shop_7"):
        load_questions("sqale", questions, schemas=schemas, cache_dir=tmp_path)


def test_sqale_limit_reads_only_the_first_questions(tmp_path):
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    schemas = write_jsonl(tmp_path / "s.jsonl", [SCHEMA])
    assert len(load_questions("sqale", questions, schemas=schemas, cache_dir=tmp_path, limit=1)) == 1


def test_bird_dev_folder(tmp_path):
    loaded = load_questions("bird", bird_folder(tmp_path))
    assert [q.difficulty for q in loaded] == ["simple", "moderate"]
    assert loaded[0].evidence == "cheapest refers to MIN(price)" and loaded[1].evidence is None
    with sqlite3.connect(loaded[0].database) as conn:
        assert conn.execute(loaded[0].gold_sql).fetchall() == [("yoyo",)]
    assert len(load_questions("bird", tmp_path / "dev.json", limit=1)) == 1


def test_bird_missing_database_names_the_path(tmp_path):
    dev = bird_folder(tmp_path)
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
    loaded = load_questions("plain", write_jsonl(tmp_path / "set.jsonl", records))
    assert loaded[0].database == str(tmp_path / "dbs" / "a.sqlite")
    assert loaded[1].database == "postgresql://u@h/db" and loaded[1].evidence == "e"
    assert loaded[2].database is None and loaded[2].difficulty == "unknown"


def test_plain_record_without_gold_sql_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "set.jsonl", [{"question": "q"}])
    with pytest.raises(ValueError, match="gold_sql"):
        load_questions("plain", path)


def test_unknown_format_lists_the_formats():
    with pytest.raises(ValueError, match="plain, sqale, bird"):
        load_questions("spider", "x")


def test_sqale_question_records_may_carry_their_schema(tmp_path):
    inline = [{**QUESTIONS[0], **{k: SCHEMA[k] for k in ("full_schema", "schema_content")}}]
    questions = write_parquet(tmp_path / "q.parquet", inline, ("schema_content",))
    loaded = load_questions("sqale", questions, cache_dir=tmp_path / "cache")
    with sqlite3.connect(loaded[0].database) as conn:
        assert conn.execute(loaded[0].gold_sql).fetchall() == [("Ana; Lda",)]


def test_sqale_without_schemas_anywhere_asks_for_them(tmp_path):
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    with pytest.raises(ValueError, match="--schemas"):
        load_questions("sqale", questions, cache_dir=tmp_path)

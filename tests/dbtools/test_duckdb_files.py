"""DuckDB over data files: one view per file named after it, the types DuckDB detects, only the given files
readable, and a changed file seen at once."""

from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path

import pytest

import dbtools.engines.database
from dbtools.agent_tools import AgentToolbox
from dbtools.engines import open_database
from dbtools.errors import ConnectionFailedError, QueryError


@pytest.fixture
def folder(tmp_path):
    data = tmp_path / "exports"
    data.mkdir()
    (data / "sales.csv").write_text(
        "id,region,amount,sold_on\n1,North,9.5,2024-01-02\n2,South,20,2024-02-03\n"
    )
    (data / "regions.tsv").write_text("code\tname\nN\tNorth\nS\tSouth\n")
    (data / "events.jsonl").write_text('{"kind": "click", "n": 3}\n{"kind": "view", "n": 5}\n')
    with gzip.open(data / "archive.csv.gz", "wt") as out:
        out.write("id,note\n1,old\n")
    (data / "notes.txt").write_text("not a table")
    return data


def test_a_folder_serves_each_data_file_as_a_table_named_after_it(folder, open_db):
    db = open_db(str(folder))
    assert [t.name for t in db.tables()] == ["archive", "events", "regions", "sales"]
    tools = AgentToolbox(db)
    assert tools.call("describe_table", {"table_name": "SALES"}).text == (
        "CREATE TABLE sales (id BIGINT, region VARCHAR, amount DOUBLE, sold_on DATE)"
    )
    assert tools.call("sample_rows", {"table_name": "regions"}).text == "code | name\nN | North\nS | South"
    assert tools.call("run_query", {"sql": "SELECT sum(n) AS total FROM events"}).text == "total\n8"
    assert tools.call("run_query", {"sql": "SELECT note FROM archive"}).text == "note\nold"


def test_one_file_is_a_database_of_one_table(folder, open_db):
    db = open_db(str(folder / "sales.csv"))
    assert [t.name for t in db.tables()] == ["sales"]
    assert db.row_count(db.table("sales"), timeout_s=5) == 2


def test_files_whose_names_clash_keep_their_format(folder, open_db):
    (folder / "sales.json").write_text('[{"id": 3}]')
    names = [t.name for t in open_db(str(folder)).tables()]
    assert "sales_csv" in names and "sales_json" in names and "sales" not in names


def test_only_the_given_files_can_be_read(folder, tmp_path, monkeypatch, open_db):
    """With the allow-list off, DuckDB itself refuses every other file, even a neighbour of the given one."""
    outside = tmp_path / "secret.csv"
    outside.write_text("password\nhunter2\n")
    db = open_db(str(folder / "sales.csv"))
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    for path in (outside, folder / "regions.tsv"):
        for sql in (f"SELECT * FROM read_csv('{path}')", f"SELECT * FROM '{path}'"):
            with pytest.raises(QueryError, match="Permission Error"):
                db.query(sql)


def test_a_changed_file_is_read_again(folder, open_db):
    db = open_db(str(folder))
    assert db.query("SELECT count(*) FROM sales").rows == [(2,)]
    with open(folder / "sales.csv", "a") as out:
        out.write("3,East,1.5,2024-03-04\n")
    os.utime(folder / "sales.csv", ns=(1, 1))  # a different modification time, however fast the write
    assert db.query("SELECT count(*) FROM sales").rows == [(3,)]
    assert db.row_count(db.table("sales"), timeout_s=5) == 3


def test_a_folder_without_data_files_or_a_missing_file_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "data.csv.bak").touch()
    with pytest.raises(ConnectionFailedError, match="is a folder, not a SQLite database"):
        open_database(str(tmp_path / "empty"))
    with pytest.raises(ConnectionFailedError, match="no file or folder at"):
        open_database(str(tmp_path / "missing.parquet"))
    with pytest.raises(ConnectionFailedError, match="no DuckDB database at"):
        open_database(str(tmp_path / "missing.duckdb"))


def test_a_file_duckdb_cannot_read_is_named(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ConnectionFailedError, match="cannot read .*broken.parquet with DuckDB"):
        open_database(str(tmp_path / "broken.parquet"))


def test_the_views_catalog_leaves_nothing_on_disk(folder):
    """The catalog file is deleted once DuckDB holds it open, so a server that is killed leaves no folder."""

    def catalogs() -> set[str]:
        return {p.name for p in Path(tempfile.gettempdir()).glob("sqlscout-duckdb-*")}

    before = catalogs()
    db = open_database(str(folder))
    assert catalogs() == before
    for _ in range(3):  # each call has a connection of its own, all reading the deleted file
        assert db.query("SELECT count(*) FROM sales").rows == [(2,)]
    db.close()

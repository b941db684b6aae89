"""The current tables: rendered between the markers and nowhere else, recorded one benchmark at a time, and each
stored table what its benchmark makes of the raw numbers kept beside it."""

import json
from pathlib import Path

import pytest

from benchmarks import tables
from benchmarks.tables import BEGIN, END, CurrentTable

RESULTS_DIR = Path(tables.__file__).resolve().parent / "results"


def table(key: str = "alpha", **changes) -> CurrentTable:
    fields = dict(
        key=key,
        title=f"{key} title",
        section=f"{key} section",
        command=f"python -m benchmarks.{key}",
        machine="a machine",
        date="2026-01-02 03:04",
        columns=["name", "ms"],
        rows=[["one", "1.5"]],
        headline=[["a measure", "a machine", "1.5", "peer 3.0", "2.00x"]],
    )
    return CurrentTable(**{**fields, **changes})


@pytest.fixture
def files(tmp_path, monkeypatch):
    """RESULTS.md and README.md with text around their blocks, and an empty current folder."""
    results, readme = tmp_path / "RESULTS.md", tmp_path / "README.md"
    results.write_text(f"# Results\n\nbefore\n\n{BEGIN}\nstale\n{END}\n\n## alpha section\n\nafter\n")
    readme.write_text(f"intro\n{BEGIN}\n{END}\noutro\n")
    monkeypatch.setattr(tables, "RESULTS", results)
    monkeypatch.setattr(tables, "README", readme)
    monkeypatch.setattr(tables, "CURRENT", tmp_path / "current")
    return results, readme


def test_recording_replaces_only_the_generated_blocks(files):
    results, readme = files
    tables.record(table())
    text = results.read_text()
    assert text.startswith("# Results\n\nbefore\n\n") and text.endswith("## alpha section\n\nafter\n")
    assert "stale" not in text
    assert "### alpha title\n\n`python -m benchmarks.alpha`, 2026-01-02 03:04, a machine." in text
    assert "[Method and full results](#alpha-section)" in text
    assert "| name | ms |\n|---|--:|\n| one | 1.5 |" in text
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("outro\n")
    assert "| [a measure](benchmarks/RESULTS.md#alpha-title) | a machine | 1.5 | peer 3.0 | 2.00x |" in (
        readme.read_text()
    )
    assert tables.regenerate(check=True) == []


def test_a_benchmarks_next_run_replaces_its_table_and_the_latest_leads_the_headline(files):
    _, readme = files
    tables.record(table())
    tables.record(table("beta", date="2026-02-01 00:00", headline=[["b", "m", "1", "p", "1x"]]))
    tables.record(table(rows=[["two", "2.5"]]))
    assert [t.rows for t in tables.load()] == [[["two", "2.5"]], [["one", "1.5"]]]
    lines = [line for line in readme.read_text().splitlines() if line.startswith("| [")]
    assert [line.split("]")[0] for line in lines] == ["| [b", "| [a measure"]


def test_check_lists_stale_files_and_changes_nothing(files):
    results, _ = files
    tables.write(table())
    before = results.read_text()
    assert tables.regenerate(check=True) == ["RESULTS.md", "README.md"]
    assert results.read_text() == before
    assert tables.main(["--check"]) == 1
    assert tables.main([]) == 0 and tables.main(["--check"]) == 0


def test_a_table_from_another_machine_is_added_by_file(files, tmp_path):
    from dataclasses import asdict

    written = tmp_path / "current.json"
    written.write_text(json.dumps(asdict(table("gpu"))))
    assert tables.main(["--add", str(written)]) == 0
    assert [t.key for t in tables.load()] == ["gpu"]
    written.write_text("{}")
    with pytest.raises(SystemExit):
        tables.main(["--add", str(written)])


def test_a_file_without_markers_is_named(files):
    results, _ = files
    results.write_text("# Results\n")
    with pytest.raises(SystemExit, match="RESULTS.md has no generated block"):
        tables.regenerate()


def test_rows_must_match_the_columns():
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        table(rows=[["one"]])
    with pytest.raises(ValueError, match="headline rows need the cells"):
        table(headline=[["too", "few"]])


def _stored(key: str) -> CurrentTable:
    return next(t for t in tables.load() if t.key == key)


def _raw(name: str) -> dict:
    return json.loads((RESULTS_DIR / name).read_text())


def _real_size(suffix: str, kind: str) -> CurrentTable:
    from benchmarks.model_cpu import current_real_size

    raw = _raw(f"model_cpu_real_size_{suffix}.json")
    return current_real_size(raw["engines"], (kind, suffix), raw["machine"], raw["date"])


def _concurrency() -> CurrentTable:
    from benchmarks.concurrency.__main__ import current

    stored = _stored("concurrency")
    return current({**_raw("concurrency.json"), "machine": stored.machine, "date": stored.date})


def _speculative() -> CurrentTable:
    from benchmarks.speculative import current

    stored = _stored("speculative")
    return current({**_raw("speculative_cpu_real_size.json"), "machine": stored.machine})


def _mcp_latency() -> CurrentTable:
    from benchmarks.mcp_latency import current

    stored = _stored("mcp_latency")
    return current(_raw("mcp_latency.json")["summary"], stored.machine, stored.date)


def _agent_episode() -> CurrentTable:
    from benchmarks.agent_episode import current

    stored = _stored("agent_episode")
    return current(_raw("agent_episode.json")["episodes"], stored.machine, stored.date)


@pytest.mark.parametrize(
    "build",
    [
        lambda: _real_size("bf16", "native bf16"),
        lambda: _real_size("avx2", "AVX2, no AVX-512"),
        lambda: _real_size("amx", "native bf16 and AMX"),
        _concurrency,
        _speculative,
        _mcp_latency,
        _agent_episode,
    ],
    ids=[
        "real-size-bf16",
        "real-size-avx2",
        "real-size-amx",
        "concurrency",
        "speculative",
        "mcp-latency",
        "agent-episode",
    ],
)
def test_a_stored_table_is_what_its_benchmark_makes_of_the_raw_numbers(build):
    built = build()
    assert built == _stored(built.key)

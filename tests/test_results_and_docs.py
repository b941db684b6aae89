"""benchmarks/RESULTS.md and the docs that point into it stay in step with it and with the benchmarks: the generated
tables are current, the index names every section, links land on a heading, and every documented benchmark command
and flag exists."""

import importlib
import re
from pathlib import Path

import pytest

from benchmarks import tables

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", RESULTS, *(ROOT / "docs").glob("*.md")])
# The two headings that frame the generated tables and the index rather than a benchmark's section.
FRAMING = ("Current results", "Sections")


def _headings() -> list[str]:
    return [
        heading for heading in re.findall(r"^## (.+)$", RESULTS.read_text(), re.M) if heading not in FRAMING
    ]


def _index() -> list[str]:
    """The section names in the first column of the index table under `## Sections`."""
    table = RESULTS.read_text().split("\n## Sections\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \|", table, re.M)
    return [row for row in rows if row not in ("section",) and not set(row) <= set("-: ")]


def test_the_generated_tables_are_current():
    assert tables.regenerate(check=True) == [], "run `python -m benchmarks.tables`"


def test_every_current_table_belongs_to_a_section():
    current = tables.load()
    assert len(current) >= 15
    for table in current:
        assert table.section in _headings(), f"{table.key}.json names a missing section: {table.section}"


def test_the_index_names_every_section_and_only_sections_that_exist():
    index, headings = _index(), _headings()
    assert len(index) >= 10
    for name in index:
        assert any(heading.startswith(name) for heading in headings), (
            f"the index names a missing section: {name}"
        )
    for heading in headings:
        assert any(heading.startswith(name) for name in index), f"the index leaves out the section: {heading}"


def test_no_two_headings_share_an_anchor():
    headings = re.findall(r"^#+ (.+)$", RESULTS.read_text(), re.M)
    anchors = [tables.anchor(heading) for heading in headings]
    assert sorted(a for a in set(anchors) if anchors.count(a) > 1) == [], "GitHub would number the later ones"


def test_links_into_the_results_land_on_a_heading():
    anchors = {tables.anchor(heading) for heading in re.findall(r"^#+ (.+)$", RESULTS.read_text(), re.M)}
    for document in DOCUMENTS:
        links = re.findall(r"RESULTS\.md#([\w-]+)", document.read_text())
        if document == RESULTS:
            links += re.findall(r"\]\(#([\w-]+)\)", document.read_text())
        for anchor in links:
            assert anchor in anchors, f"{document.name} links to #{anchor}, which RESULTS.md no longer has"


def _commands() -> list[tuple[str, str, list[str]]]:
    """(document, module, flags) of every `python -m benchmarks.MODULE ...` written in a code span or block."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        spans = re.findall(r"```.*?```|`[^`]+`", text, re.S)
        for span in spans:
            for line in re.findall(r"python -m (benchmarks[\w.]*)([^`\n]*(?:\n  [^`\n]*)*)", span):
                module, rest = line
                found.append((document.name, module, re.findall(r"(?<![\w-])--[a-z][\w-]*", rest)))
    return found


def _sources(module: str) -> list[Path]:
    path = ROOT.joinpath(*module.split("."))
    if path.is_dir():
        return sorted(path.rglob("*.py"))
    file = path.with_suffix(".py")
    return [file] if file.is_file() else []


def _flags(sources: list[Path]) -> set[str]:
    """The flags the command's own parser takes: build_parser() of its module, or of the file of its package that
    defines one (none for a command without options)."""
    defining = [path for path in sources if "def build_parser(" in path.read_text()]
    if not defining:
        return set()
    module = importlib.import_module(".".join(defining[0].relative_to(ROOT).with_suffix("").parts))
    return set(module.build_parser()._option_string_actions)


def test_every_documented_benchmark_command_exists_with_the_flags_it_is_given():
    commands = _commands()
    assert len({module for _, module, _ in commands}) >= 15
    for document, module, flags in commands:
        sources = _sources(module)
        assert sources, f"{document} documents `python -m {module}`, which does not exist"
        taken = _flags(sources) if flags else set()
        for flag in flags:
            assert flag in taken, (
                f"{document} gives `python -m {module}` the flag {flag}, which it does not take"
            )


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "Speculative decoding at the real Qwen3.5-2B size (CPU) (`python -m benchmarks.speculative`)",
            "speculative-decoding-at-the-real-qwen35-2b-size-cpu-python--m-benchmarksspeculative",
        ),
        ("CPU weights: fidelity", "cpu-weights-fidelity"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading, anchor):
    assert tables.anchor(heading) == anchor

"""The GPU suite's current table, read from the files of the recorded H200 run laid out as the suite writes them."""

import json
import shutil
from pathlib import Path

from benchmarks.gpu_current import NOT_MEASURED, gpu_table

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
MACHINE = "NVIDIA H200; torch 2.11.0+cu130"


def suite_folder(tmp_path: Path) -> Path:
    for recorded, written in (
        ("gpu_h200_model_decode.json", "model_decode.json"),
        ("gpu_h200_ask.json", "gpu_ask.json"),
        ("gpu_h200_profile.json", "gpu_profile.json"),
        ("gpu_h200_kernels.csv", "kernels.csv"),
    ):
        shutil.copy(RESULTS / recorded, tmp_path / written)
    variants = json.loads((RESULTS / "gpu_h200_speculative_captured_verify.json").read_text())
    report = {"machine": MACHINE, "date": "2026-12-04", "text": "replayed", "variants": variants}
    (tmp_path / "speculative.json").write_text(json.dumps(report))
    return tmp_path


def test_each_measure_is_read_from_the_step_that_wrote_it(tmp_path):
    table = gpu_table(suite_folder(tmp_path), MACHINE, "2026-12-04 17:36 UTC")
    measured = {row[0].split(",")[0].split(" (")[0]: row[1:3] for row in table.rows}
    assert measured["batch-1 decode at 4"][0].startswith("471 tokens/s (42% of the 1,116")
    assert measured["batch-1 decode at 4"][1].endswith("(41x)")
    assert measured["an agent turn: append 400 tokens at 2k context"][0] == "29 ms"
    assert measured["an ask episode: generated tokens over model time"][0] == "93 tokens/s (0.20x)"
    assert measured["speculative decoding"][0].endswith("(0.82x; 0.62-1.13x an episode)")
    assert measured["prefill attention"] == ["482 us, 143 TFLOP/s", "SDPA flash 358 us (0.74x)"]
    assert measured["decode attention"][0] == "13.5 us a layer"
    assert table.headline == [
        [
            "GPU decode tokens/s at 4,096 tokens of context, batch 1",
            "NVIDIA H200",
            "471",
            "transformers `generate` 11.5",
            "41x",
        ]
    ]


def test_a_step_that_did_not_run_leaves_its_row_unmeasured_and_no_headline(tmp_path):
    table = gpu_table(tmp_path, MACHINE, "2026-12-04 17:36 UTC")
    assert [row[1] for row in table.rows] == [NOT_MEASURED] * len(table.rows)
    assert table.headline == []

"""The CPU products benchmark's table: each cell's ratio is torch's time over the product's, in the section and in
the current table alike."""

from __future__ import annotations

from benchmarks.cpu_products import KINDS, current, report


def test_the_ratio_is_torchs_time_over_ours():
    seconds = {"torch": 2.0, **{kind: 0.5 for kind in KINDS}}
    result = {
        "level": "avx2",
        "instructions": "AVX2, F16C",
        "peer_dtype": "float32",
        "seconds": seconds | {"int4": 4.0},
        "gb_per_s": {name: 10.0 for name in seconds},
    }
    table = current([result], 2, "2026-01-01 00:00")
    assert table.rows[0][:6] == [
        "avx2",
        "AVX2, F16C",
        "float32, 10.0 GB/s",
        "10.0 (4.00x)",
        "10.0 (4.00x)",
        "10.0 (0.50x)",
    ]
    assert report(table).splitlines()[-1] == "| " + " | ".join(table.rows[0]) + " |"

"""The CPU products benchmark's table: each cell's ratio is torch's time over the product's."""

from __future__ import annotations

from benchmarks.cpu_products import KINDS, report


def test_the_ratio_is_torchs_time_over_ours():
    seconds = {"torch": 2.0, **{kind: 0.5 for kind in KINDS}}
    result = {
        "level": "avx2",
        "instructions": "AVX2, F16C",
        "peer_dtype": "float32",
        "seconds": seconds | {"int4": 4.0},
        "gb_per_s": {name: 10.0 for name in seconds},
    }
    row = report([result], 2).splitlines()[-1]
    assert row.startswith(
        "| avx2 | AVX2, F16C | float32, 10.0 GB/s | 10.0 (4.00x) | 10.0 (4.00x) | 10.0 (0.50x)"
    )

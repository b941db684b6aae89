"""Every Triton kernel compiles for each NVIDIA target at the Qwen3.5-2B shapes, with the launch settings that
target's shared memory selects, and its compiled code fits: shared memory within the target's limit, no register
spills on the decode path, at most SPILL_BOUND_BYTES of spill stores elsewhere. Checked without a GPU.

The interpreter accepts code the GPU compiler rejects, and this process defined its kernels for the interpreter,
so the compiles run once per session in a process without it (benchmarks.kernels.resources, which keeps ptxas's
reports in Triton's cache: a first run compiles 124 kernels in about 3 minutes on 2 cores, a later one reads them
back in about 20 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from benchmarks.kernels.resources import SPILL_BOUND_BYTES, TARGETS, Row, current

# Slow (left out of the fast tier): compiles 124 kernels for six GPU targets (minutes on a first run).
pytestmark = [
    pytest.mark.skipif(
        torch.cuda.is_available(), reason="on a GPU the other kernel tests compile and launch every kernel"
    ),
    pytest.mark.slow,
]

ARCHES = [target.arch for target in TARGETS]


@pytest.fixture(scope="session")
def rows():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.kernels.resources"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _on(rows: list[dict], arch: str) -> list[dict]:
    found = [row for row in rows if row["target"] == arch]
    assert found, f"nothing compiled for {arch}"
    return found


def _name(row: dict) -> str:
    return f"{row['kernel']} {row['variant']} {row['config']} ({', '.join(row['scenarios'])})"


@pytest.mark.parametrize("arch", ARCHES)
def test_every_kernel_compiles(rows, arch):
    failed = {_name(row): row["error"] for row in _on(rows, arch) if row["error"]}
    assert failed == {}


@pytest.mark.parametrize("arch", ARCHES)
def test_shared_memory_within_the_targets_limit(rows, arch):
    over = {_name(row): f"{row['shared']} > {row['shared_limit']} B" for row in _on(rows, arch)
            if row["shared"] > row["shared_limit"]}  # fmt: skip
    assert over == {}


@pytest.mark.parametrize("arch", ARCHES)
def test_decode_kernels_never_spill(rows, arch):
    spilled = {_name(row): f"{row['spill_stores']} B stored, {row['registers']} registers"
               for row in _on(rows, arch) if row["decode"] and (row["spill_stores"] or row["spill_loads"])}  # fmt: skip
    assert spilled == {}


@pytest.mark.parametrize("arch", ARCHES)
def test_other_kernels_spill_at_most_the_bound(rows, arch):
    spilled = {_name(row): f"{row['spill_stores']} B stored" for row in _on(rows, arch)
               if row["spill_stores"] > SPILL_BOUND_BYTES}  # fmt: skip
    assert spilled == {}


def test_every_target_sees_every_kernel(rows):
    kernels = {arch: {row["kernel"] for row in _on(rows, arch)} for arch in ARCHES}
    assert all(names == kernels[ARCHES[0]] for names in kernels.values())
    assert {"decode_split", "attention_prefill", "chunk_prepare", "recurrent", "conv_trail"} <= kernels[
        ARCHES[0]
    ]


def test_the_current_table_sums_each_targets_compiles(rows):
    table = current([Row(**row) for row in rows], "2026-01-01 00:00")
    assert [cells[0] for cells in table.rows] == ARCHES
    for arch, cells in zip(ARCHES, table.rows, strict=True):
        compiled = [row for row in rows if row["target"] == arch]
        assert cells[2] == str(len(compiled))
        assert int(cells[3]) == max(row["registers"] for row in compiled)
        assert int(cells[4]) == sum(row["spill_stores"] for row in compiled)

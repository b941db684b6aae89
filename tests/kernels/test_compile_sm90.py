"""Every Triton kernel compiles for the H200 (sm_90) within its shared memory, checked without a GPU.

The interpreter accepts code the GPU compiler rejects (non-constexpr globals, oversized tiles), so each kernel
is compiled ahead of time for sm_90 with its launcher's settings, in a process without the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.kernels.sm90_compile import KERNELS

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="on a GPU the other kernel tests compile and launch every kernel"
)

H200_SHARED_BYTES = 232_448


@pytest.fixture(scope="module")
def compiled():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-m", "tests.kernels.sm90_compile"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(KERNELS))
def test_compiles_for_h200(compiled, name):
    result = compiled[name]
    assert "error" not in result, result.get("error")
    assert result["cubin"]
    assert result["shared"] <= H200_SHARED_BYTES, f"{name} needs {result['shared']} B of shared memory"

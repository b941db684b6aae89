"""Whether the CPU kernels are built with OpenMP: with it where the C++ compiler builds OpenMP code, without it
where the compiler rejects -fopenmp (Apple's clang) or lacks the OpenMP runtime (clang without libomp)."""

from __future__ import annotations

import functools
import shlex
import subprocess
import tempfile
from pathlib import Path

import torch

FLAGS = ("-fopenmp",)
PROBE = "#include <omp.h>\nint threads() { return omp_get_max_threads(); }\n"


@functools.cache
def flags(compiler: str) -> tuple[str, ...]:
    """FLAGS where `compiler` (a command line, such as $CXX) compiles and links a library that calls OpenMP,
    else none: a compiler that does not run at all is left for the kernels' build to report."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "probe.cpp"
        source.write_text(PROBE)
        command = [
            *shlex.split(compiler),
            *FLAGS,
            "-fPIC",
            "-shared",
            str(source),
            "-o",
            str(source.with_suffix(".so")),
        ]
        try:
            done = subprocess.run(command, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return ()
    return FLAGS if done.returncode == 0 else ()


# Built without OpenMP, do the kernels' at::parallel_for loops still run in parallel? Not under a torch built with
# OpenMP (the Linux wheels; parallel_info() names the backend): ATen/Parallel.h then takes ParallelOpenMP.h,
# which defines INTRA_OP_PARALLEL and its `#pragma omp parallel` loop only under _OPENMP, the define that
# -fopenmp sets in the kernels' own compile, and without it Parallel-inl.h calls the loop's body once, over the
# whole range, on the calling thread. Under a torch built with its native thread pool (AT_PARALLEL_NATIVE)
# INTRA_OP_PARALLEL is always defined and the loop is handed to libtorch's pool, so they do.
def parallel_without_openmp() -> bool:
    """Whether at::parallel_for in code compiled without OpenMP still spreads over torch's threads."""
    return "parallel backend: OpenMP" not in torch.__config__.parallel_info()

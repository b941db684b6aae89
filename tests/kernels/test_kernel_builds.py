"""The C++ kernels (kernels/cpu/library.cpp) compile with each compiler installed here, to an object file at every
instruction-set level: g++ and clang++ (as macOS's compiler is) for this machine's architecture, and Debian's aarch64
cross compiler for Arm's NEON path with and without SDOT, BFDOT and I8MM. A change that only one compiler or
architecture rejects fails here, with the compiler's errors, rather than as a plain-PyTorch fallback on a user's
machine."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor

import pytest
from torch.utils import cpp_extension

from kernels.cpu import LIBRARY_SOURCE, compile_flags, isa, openmp

# Arm's dot-product and matrix extensions (ARMv8.2 to v8.6 CPUs: Graviton 3, Apple M2), which the baseline level
# leaves out: the kernels' branches that use them compile only here.
ARM_EXTENSIONS = ("-march=armv8.2-a+dotprod+bf16+i8mm",)
ARM = [*(level.flags for level in isa.ARM_LEVELS.values()), ARM_EXTENSIONS]
HOST = (
    ARM
    if platform.machine().lower() in isa.ARM_MACHINES
    else [level.flags for level in isa.X86_LEVELS.values()]
)
COMPILERS = {"g++": HOST, "clang++": HOST, "aarch64-linux-gnu-g++": ARM}
# Debian's package of each, which scripts/test.sh installs.
PACKAGES = {"g++": "g++", "clang++": "clang", "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu"}
ERROR_CHARS = 6000
# What torch.utils.cpp_extension adds to every C++ compile of an extension's source (as of torch 2.13: C++20, and
# no _GLIBCXX_USE_CXX11_ABI define, every build being on the new ABI).
TORCH_FLAGS = [
    "-DTORCH_EXTENSION_NAME=sqlscout_cpu_products",
    "-DTORCH_API_INCLUDE_EXTENSION_H",
    *(
        f"-isystem{folder}"
        for folder in [*cpp_extension.include_paths(), sysconfig.get_path("include", scheme="posix_prefix")]
    ),
    "-fPIC",
    "-std=c++20",
]


# Compiles running at once: each is one core's work, and the other test worker's tests (servers with deadlines among
# them) need the rest of the cores.
COMPILES_AT_ONCE = max(1, (os.cpu_count() or 2) // 2)


def run_at_most(count: int, commands) -> list[subprocess.CompletedProcess]:
    """Each command run to its end, `count` at a time; their results in order."""
    with ThreadPoolExecutor(count) as pool:
        return list(
            pool.map(lambda command: subprocess.run(command, capture_output=True, text=True), commands)
        )


# Slow (left out of the fast tier): compiles the C++ kernels at every instruction-set level with each compiler
# (about 2 minutes on 2 cores).
@pytest.mark.slow
@pytest.mark.parametrize("compiler", COMPILERS)
def test_the_kernels_compile_with_each_compiler(compiler, tmp_path):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (Debian package {PACKAGES[compiler]})")
    commands = {
        " ".join(flags): [
            compiler,
            *TORCH_FLAGS,
            *compile_flags(flags, compiler),
            "-c",
            str(LIBRARY_SOURCE),
            "-o",
            str(tmp_path / f"library{index}.o"),
        ]
        for index, flags in enumerate(COMPILERS[compiler])
    }
    runs = dict(zip(commands, run_at_most(COMPILES_AT_ONCE, commands.values()), strict=True))
    errors = {level: run.stderr for level, run in runs.items()}
    failed = [level for level, run in runs.items() if run.returncode != 0]
    # The first errors are the cause; the rest often follow from them.
    assert not failed, "\n".join(
        f"{compiler} {level} fails:\n{errors[level][:ERROR_CHARS]}" for level in failed
    )


def test_openmp_is_left_out_where_the_compiler_does_not_build_it():
    assert openmp.flags("no-such-compiler++") == ()
    assert openmp.flags("false") == ()  # as Apple's clang, which rejects -fopenmp
    if shutil.which("g++") is not None:
        assert openmp.flags("g++") == openmp.FLAGS

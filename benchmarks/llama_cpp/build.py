"""Builds the CPU peers from their PyPI sdists, once each, into the cache directory: llama.cpp's bench, quantize
and server tools and its shared library (llama-cpp-python), and ik_llama.cpp's bench (ik-llama-cpp-python)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dbtools.cache import cache_dir
from kernels.cpu import isa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fork:
    """A llama.cpp tree vendored in a PyPI sdist, and what the benchmarks build of it."""

    name: str
    package: str
    version: str
    targets: tuple[str, ...]  # cmake targets
    binaries: tuple[str, ...]  # copied out of the build beside the libraries
    bindings_dependencies: tuple[
        str, ...
    ] = ()  # installed beside the sdist's Python bindings, not into our env
    cmake_flags: tuple[str, ...] = ()
    bench_has_depth: bool = True  # llama-bench's -d (decode after a context); without it, -gp CONTEXT,TOKENS
    # The sdist leaves out the script that writes common/build-info.cpp from git: written here, from its template.
    writes_build_info: bool = False

    @property
    def source_folder(self) -> str:
        """The tree's folder inside the unpacked sdist."""
        return f"vendor/{self.name}"


# The sdist vendors a llama.cpp that knows Qwen3.5 (architecture qwen35); a newer one may change its outputs.
LLAMA_CPP = Fork(
    name="llama.cpp",
    package="llama-cpp-python",
    version="0.3.36",
    targets=("llama-bench", "llama-quantize", "llama-server", "llama"),
    binaries=("llama-bench", "llama-quantize", "llama-server"),
    bindings_dependencies=("diskcache==5.6.3",),
)
# The fork CPU users pick when speed matters: its own matrix products (iqk) and, with llama-bench's -rtr 1, weights
# repacked at load for them. It reads the GGUF files llama.cpp's converter writes.
IK_LLAMA_CPP = Fork(
    name="ik_llama.cpp",
    package="ik-llama-cpp-python",
    version="0.1.5",
    targets=("llama-bench",),
    binaries=("llama-bench",),
    # Its llama-bench is among the examples (llama.cpp's is a tool), and linked statically: its build leaves the
    # shared libraries in folders of their own. Flash attention kernels for every quantized KV cache type are left
    # out: the benchmark keeps the default f16 cache, and they double the build's time.
    cmake_flags=("-DLLAMA_BUILD_EXAMPLES=ON", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_IQK_FA_ALL_QUANTS=OFF"),
    bench_has_depth=False,
    writes_build_info=True,
)
VERSION = LLAMA_CPP.version  # the converter's version, part of each GGUF file's cache key
MARKER = "built.json"  # written last: a folder without it is a build that did not finish
CMAKE_FLAGS = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    # libllama.so is what the Python bindings load; $ORIGIN lets the binaries find it after being copied.
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
)
# ggml's AMX kernels (compiled in wherever -march=native has AMX) crash in their batched products on Intel Xeons with
# AMX: a Q4_K_M prefill segfaults in ggml_backend_amx_mul_mat (ggml-org/llama.cpp#20824), a Q8_0 one stops on an
# illegal instruction. So the peer is built without them, as it runs on those CPUs; GCC's explicit -mno- flags win
# over -march=native whatever their order.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
X86_MACHINES = ("x86_64", "AMD64")


# ggml's instruction sets for each --cpu-isa level below native (kernels/cpu/isa.py): the peer is built for the
# level sqlscout's kernels are capped at, so that both run the same CPU's lower ISA.
GGML_OPTIONS = ("AVX", "AVX2", "FMA", "F16C", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16")
GGML_LEVELS = {
    "avx512-bf16": {"AVX", "AVX2", "FMA", "F16C", "AVX512", "AVX512_VNNI", "AVX512_BF16"},
    "avx512": {"AVX", "AVX2", "FMA", "F16C", "AVX512"},
    "avx2": {"AVX", "AVX2", "FMA", "F16C"},
    "generic": set(),
}


def cmake_flags(fork: Fork = LLAMA_CPP) -> tuple[str, ...]:
    """The configure flags for this machine, at the level SQLSCOUT_CPU_ISA caps sqlscout's kernels at (native, the
    default: -march=native without AMX)."""
    common = (*CMAKE_FLAGS, *fork.cmake_flags)
    level = os.environ.get(isa.ENV_VAR, isa.NATIVE)
    if platform.machine() not in X86_MACHINES:
        return (*common, "-DGGML_NATIVE=ON")
    if level in GGML_LEVELS:
        wanted = GGML_LEVELS[level]
        return (
            *common,
            "-DGGML_NATIVE=OFF",
            *(f"-DGGML_{option}={'ON' if option in wanted else 'OFF'}" for option in GGML_OPTIONS),
        )
    return (*common, "-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}")


def sdist_root(tools: Path) -> Path:
    """The unpacked sdist: its `llama_cpp` package holds the Python bindings."""
    return tools / "sdist"


def llama_cpp_source(tools: Path, fork: Fork = LLAMA_CPP) -> Path:
    """The vendored tree: `convert_hf_to_gguf.py` and `gguf-py/`."""
    return sdist_root(tools) / fork.source_folder


def gguf_py(tools: Path) -> Path:
    """The folder to put on sys.path to import llama.cpp's own `gguf` package."""
    return llama_cpp_source(tools) / "gguf-py"


def bindings_path(tools: Path) -> list[Path]:
    """The folders to put on sys.path to import the `llama_cpp` bindings and their dependencies."""
    return [sdist_root(tools), tools / "site-packages"]


def run_tool(
    command: list[str], what: str, *, env: dict[str, str] | None = None, timeout_s: float | None = None
) -> str:
    """Run command and return its stdout; a failure raises RuntimeError with the tail of its output."""
    log.info("%s: %s", what, " ".join(command))
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"{what} took over {timeout_s} s") from error
    if done.returncode != 0:
        tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-20:])
        raise RuntimeError(f"{what} failed with exit status {done.returncode}:\n{tail}")
    return done.stdout


def _unpack_sdist(download: Path, target: Path) -> None:
    archive = next(download.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(download, filter="data")
    (download / archive.name.removesuffix(".tar.gz")).rename(target)


def write_build_info(source: Path, fork: Fork) -> None:
    """common/build-info.cpp from its template, naming the sdist's version where git would name a commit, and the
    script the build runs to write it (missing from the sdist) as one that leaves it as it is."""
    template = (source / "common" / "build-info.cpp.in").read_text()
    values = {
        "BUILD_NUMBER": "0",
        "BUILD_COMMIT": f"{fork.package}-{fork.version}",
        "BUILD_COMPILER": "unknown",
        "BUILD_TARGET": platform.machine(),
    }
    for name, value in values.items():
        template = template.replace(f"@{name}@", value)
    (source / "common" / "build-info.cpp").write_text(template)
    script = source / "common" / "cmake" / "build-info-gen-cpp.cmake"
    script.parent.mkdir(exist_ok=True)
    script.write_text("# common/build-info.cpp is written before the build\n")


def llama_cpp_tools(fork: Fork = LLAMA_CPP) -> Path:
    """The folder holding the fork's binaries (llama.cpp: llama-bench, llama-quantize, llama-server, libllama.so),
    its libggml libraries and the unpacked sdist, built on first use (10-25 minutes on 2 cores), in a folder of its
    own per version and flags."""
    flags = cmake_flags(fork)
    fingerprint = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:8]
    tools = cache_dir() / f"{fork.name}-{fork.version}-{fingerprint}"
    if (tools / MARKER).is_file():
        return tools
    what = f"{fork.name} from {fork.package} {fork.version}"
    log.warning("building %s into %s: 10-25 minutes on 2 cores (once)", what, tools)
    started = time.monotonic()
    shutil.rmtree(tools, ignore_errors=True)
    tools.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    with tempfile.TemporaryDirectory(dir=tools) as scratch:
        download, build = Path(scratch) / "download", Path(scratch) / "build"
        run_tool(
            [
                *pip,
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{fork.package}=={fork.version}",
                "-d",
                str(download),
            ],
            f"downloading {fork.package} {fork.version}",
        )
        _unpack_sdist(download, sdist_root(tools))
        if fork.writes_build_info:
            write_build_info(llama_cpp_source(tools, fork), fork)
        if fork.bindings_dependencies:
            run_tool(
                [
                    *pip,
                    "install",
                    "--no-deps",
                    "--target",
                    str(bindings_path(tools)[1]),
                    *fork.bindings_dependencies,
                ],
                "installing the bindings' dependencies",
            )
        run_tool(
            ["cmake", "-S", str(llama_cpp_source(tools, fork)), "-B", str(build), *flags],
            f"configuring {fork.name}",
        )
        jobs = str(os.cpu_count() or 1)
        log.warning("compiling %s with %s jobs", fork.name, jobs)
        run_tool(
            ["cmake", "--build", str(build), "-j", jobs, "--target", *fork.targets], f"compiling {fork.name}"
        )
        # The libraries land beside the binaries in build/bin, where the binaries' $ORIGIN rpath looks; their
        # versioned symlinks (libllama.so -> libllama.so.0) are copied as links.
        built = build / "bin"
        for path in [*(built / name for name in fork.binaries), *built.glob("lib*.so*")]:
            shutil.copy2(path, tools / path.name, follow_symlinks=False)
    seconds = round(time.monotonic() - started)
    (tools / MARKER).write_text(json.dumps({"version": fork.version, "build_seconds": seconds}) + "\n")
    log.warning("built %s in %d s", fork.name, seconds)
    return tools

"""Builds llama.cpp's bench, quantize and server tools and its shared library from the llama-cpp-python sdist,
once, into the cache directory."""

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
from pathlib import Path

from dbtools.cache import cache_dir
from kernels.cpu import isa

log = logging.getLogger(__name__)

# The sdist vendors a llama.cpp that knows Qwen3.5 (architecture qwen35); a newer one may change its outputs.
VERSION = "0.3.36"
PACKAGE = "llama-cpp-python"
# The bindings' only dependency missing from our environment; installed beside them, not into it.
BINDINGS_DEPENDENCIES = ("diskcache==5.6.3",)
TARGETS = ("llama-bench", "llama-quantize", "llama-server", "llama")
BINARIES = ("llama-bench", "llama-quantize", "llama-server")
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


def cmake_flags() -> tuple[str, ...]:
    """The configure flags for this machine, at the level SQLSCOUT_CPU_ISA caps sqlscout's kernels at (native, the
    default: -march=native without AMX)."""
    level = os.environ.get(isa.ENV_VAR, isa.NATIVE)
    if platform.machine() not in X86_MACHINES:
        return (*CMAKE_FLAGS, "-DGGML_NATIVE=ON")
    if level in GGML_LEVELS:
        wanted = GGML_LEVELS[level]
        return (
            *CMAKE_FLAGS,
            "-DGGML_NATIVE=OFF",
            *(f"-DGGML_{option}={'ON' if option in wanted else 'OFF'}" for option in GGML_OPTIONS),
        )
    return (*CMAKE_FLAGS, "-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}")


def sdist_root(tools: Path) -> Path:
    """The unpacked sdist: its `llama_cpp` package holds the Python bindings."""
    return tools / "sdist"


def llama_cpp_source(tools: Path) -> Path:
    """The vendored llama.cpp tree: `convert_hf_to_gguf.py` and `gguf-py/`."""
    return sdist_root(tools) / "vendor" / "llama.cpp"


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


def llama_cpp_tools() -> Path:
    """The folder holding llama-bench, llama-quantize, llama-server, libllama.so, the libggml libraries and the
    unpacked sdist, built on first use (10-25 minutes on 2 cores), in a folder of its own per version and flags."""
    flags = cmake_flags()
    fingerprint = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:8]
    tools = cache_dir() / f"llama.cpp-{VERSION}-{fingerprint}"
    if (tools / MARKER).is_file():
        return tools
    log.warning(
        "building llama.cpp from %s %s into %s: 10-25 minutes on 2 cores (once)", PACKAGE, VERSION, tools
    )
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
                f"{PACKAGE}=={VERSION}",
                "-d",
                str(download),
            ],
            f"downloading {PACKAGE} {VERSION}",
        )
        _unpack_sdist(download, sdist_root(tools))
        run_tool(
            [*pip, "install", "--no-deps", "--target", str(bindings_path(tools)[1]), *BINDINGS_DEPENDENCIES],
            "installing the bindings' dependencies",
        )
        run_tool(
            ["cmake", "-S", str(llama_cpp_source(tools)), "-B", str(build), *flags],
            "configuring llama.cpp",
        )
        jobs = str(os.cpu_count() or 1)
        log.warning("compiling llama.cpp with %s jobs", jobs)
        run_tool(["cmake", "--build", str(build), "-j", jobs, "--target", *TARGETS], "compiling llama.cpp")
        # The libraries land beside the binaries in build/bin, where the binaries' $ORIGIN rpath looks; their
        # versioned symlinks (libllama.so -> libllama.so.0) are copied as links.
        built = build / "bin"
        for path in [*(built / name for name in BINARIES), *built.glob("lib*.so*")]:
            shutil.copy2(path, tools / path.name, follow_symlinks=False)
    seconds = round(time.monotonic() - started)
    (tools / MARKER).write_text(json.dumps({"version": VERSION, "build_seconds": seconds}) + "\n")
    log.warning("built llama.cpp in %d s", seconds)
    return tools

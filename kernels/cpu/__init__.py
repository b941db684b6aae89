"""The C++ CPU kernels, compiled for this machine's CPU on first use, one library: the weight products
(weight_products.cpp; bf16 ones on AMX tiles in amx_products.cpp), the stored matrices' rows written out dense for
a prefill's products (dense_rows.cpp), and the fused steps of a decode token: a Gated DeltaNet layer between its
projections (gated_delta_net_step.cpp), an attention layer's normed and rotated inputs (attention_inputs.cpp),
attention of a step's query (attention_step.cpp), RMSNorm with its residual add (rms_norm.cpp) and SwiGLU
(swiglu.cpp), compiled together as library.cpp.

torch.utils.cpp_extension builds the library once (about 10-20 s) into torch's extension cache
(TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions) and reloads it from there; a changed source or
compiler flag builds again. It is built for this CPU (-march=native) unless set_isa() or SQLSCOUT_CPU_ISA caps
the instruction set at a lower level (kernels/cpu/isa.py), each level a library of its own, and with OpenMP where
the compiler builds it (kernels/cpu/openmp.py). Without a C++ compiler, with SQLSCOUT_KERNELS=torch, or when the
build fails, the same math runs in plain PyTorch instead (kernels/reference), after a one-line notice.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
from pathlib import Path

import torch

from kernels.backend import get_backend
from kernels.cpu import isa, openmp

log = logging.getLogger(__name__)

LIBRARY_SOURCE = Path(__file__).with_name("library.cpp")
# The files library.cpp includes.
INCLUDED = [
    Path(__file__).with_name(name)
    for name in (
        "weight_products.cpp",
        "dense_rows.cpp",
        "amx_products.cpp",
        "gated_delta_net_step.cpp",
        "attention_step.cpp",
        "rms_norm.cpp",
        "attention_inputs.cpp",
        "swiglu.cpp",
        "instructions.cpp",
        "vectors.h",
    )
]
LIBRARY = "sqlscout_cpu_products"
# How much slower the plain-PyTorch fallback decodes than the kernels: greedy 64-token decodes of the mid-size random
# checkpoint of benchmarks/model_cpu.py (fp32), best of 7, took 120 against 630 tokens/s on one thread and 130
# against 810 on two (a 2-vCPU AMD EPYC Zen 4 VM, AVX-512 with bf16, SQLSCOUT_KERNELS=torch against the default).
FALLBACK_SLOWDOWN = "5x"
# What to install for a compiler that builds the kernels, by platform.system().
COMPILER_INSTALL = {
    "Linux": "install a C++ compiler (Debian/Ubuntu: apt-get install g++)",
    "Darwin": "install Apple's command line tools (xcode-select --install)",
    # torch builds Windows extensions with MSVC (the Visual Studio Build Tools' cl.exe): installing those would not
    # build these kernels.
    "Windows": "run sqlscout in WSL and apt-get install g++ there (on Windows torch builds extensions with MSVC, "
    "which lacks the GCC/Clang vector extensions the kernels are written in)",
}


def _products(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.new_empty(x.shape[0], n, dtype=torch.float32)


def _queries(projected: torch.Tensor, dim: int, kv_heads: int) -> torch.Tensor:
    """[B, T, Hq, D] for a QKV projection's output [B, T, Hq * 2D + 2 * Hkv * D]."""
    q_heads = (projected.shape[2] - 2 * kv_heads * dim) // (2 * dim)
    return projected.new_empty(*projected.shape[:2], q_heads, dim)


# Shape-only versions of the functional ops, for torch.compile.
FAKES = {
    "float_linear": lambda x, tiles, n: _products(x, n),
    "bf16_dot_linear": lambda x, tiles, n: _products(x, n),
    "int8_linear": lambda x, rows, scales: _products(x, rows.shape[0]),
    "affine_linear": lambda x, rows, bits: _products(x, rows.shape[0]),
    "amx_bf16_linear": lambda x, tiles, n: _products(x, n),
    "amx_untile_rows": lambda tiles, first, count, dtype: tiles.new_empty(count, tiles.shape[1], dtype=dtype),
    "untile_rows": lambda tiles, first, count, dtype: tiles.new_empty(count, tiles.shape[1], dtype=dtype),
    "int8_rows": lambda rows, scales, first, count, dtype: rows.new_empty(count, rows.shape[1], dtype=dtype),
    "affine_rows": lambda rows, bits, first, count, k, dtype: rows.new_empty(count, k, dtype=dtype),
    "gated_delta_net_step": lambda projected, conv_weight, conv_state, A_log, dt_bias, state, *rest: (
        projected.new_empty(*projected.shape[:2], state.shape[1] * state.shape[3])
    ),
    "attention_step": lambda q, *rest: torch.empty_like(q, memory_format=torch.contiguous_format),
    "rms_norm_rows": lambda x, *rest: torch.empty_like(x, memory_format=torch.contiguous_format),
    "attention_inputs": lambda projected, q_norm, k_norm, eps, positions, inv_freq, k_cache, v_cache: (
        _queries(projected, q_norm.shape[0], k_cache.shape[1]),
        _queries(projected, q_norm.shape[0], k_cache.shape[1]),
    ),
    "swiglu_rows": lambda gate, up: gate.new_empty(gate.shape),
    "add_rms_norm_rows": lambda x, *rest: (
        torch.empty_like(x, memory_format=torch.contiguous_format),
        torch.empty_like(x, memory_format=torch.contiguous_format),
    ),
}


def sources_flag() -> str:
    """A define naming the included files' digest: torch rebuilds when library.cpp or the flags change, and only
    this flag tells it that a file it includes did."""
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in INCLUDED)).hexdigest()[:16]
    return f"-DSQLSCOUT_SOURCES={digest}"


def compile_flags(instruction_flags: tuple[str, ...], compiler: str) -> list[str]:
    """The flags library.cpp is compiled with, besides torch's own: a level's instruction flags, and OpenMP where
    `compiler` builds it."""
    # -Wno-psabi: the vector helpers are inline and internal, so the ABI notes GCC prints are noise.
    return ["-O3", *instruction_flags, *openmp.flags(compiler), "-Wno-psabi", sources_flag()]


def _put_ninja_on_path() -> None:
    """torch runs `ninja` from PATH; the ninja package installed with sqlscout is not on it when the virtual
    environment's python runs without the environment activated (as MCP hosts start it)."""
    try:
        import ninja
    except ImportError:
        return
    folder = str(ninja.BIN_DIR)
    if folder not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([folder, os.environ.get("PATH", "")])


def _build() -> object | None:
    """torch.ops.sqlscout_cpu once the library is loaded, or None (with the reason logged) when it cannot be."""
    from torch.utils import cpp_extension

    _put_ninja_on_path()
    try:
        isa.check(_isa)
    except ValueError as error:
        raise ValueError(f"{isa.ENV_VAR} {error}") from None
    isa.cap_torch(_isa)  # as set_isa() does, for a level given by SQLSCOUT_CPU_ISA alone
    log.info("loading the CPU kernels for %s (compiled on first use, about 15 s)", _level_words())
    compiler = cpp_extension.get_cxx_compiler()
    # Built without OpenMP, the kernels' loops run on the calling thread alone under an OpenMP torch (openmp.py).
    parallel = openmp.flags(compiler)
    try:
        cpp_extension.load(
            name=library_name(_isa),
            sources=[str(LIBRARY_SOURCE)],
            extra_cflags=compile_flags(isa.compile_flags(_isa), compiler),
            extra_ldflags=list(parallel),
            is_python_module=False,
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError, SystemExit) as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        log.warning(
            "the CPU kernels run in plain PyTorch, which decodes about %s slower: the C++ kernels could not be "
            "built (%s); to build them, %s",
            FALLBACK_SLOWDOWN,
            reason,
            COMPILER_INSTALL.get(platform.system(), COMPILER_INSTALL["Linux"]),
        )
        return None
    if not parallel and not openmp.parallel_without_openmp():
        log.warning(
            "the CPU kernels run on one thread: %s does not build OpenMP code (-fopenmp), which this torch's "
            "at::parallel_for needs in them; set CXX to a compiler that does (g++, or clang++ with libomp)",
            compiler,
        )
    for name, fake in FAKES.items():
        torch.library.register_fake(f"sqlscout_cpu::{name}")(fake)
    log.info("the CPU kernels use %s", torch.ops.sqlscout_cpu.instructions())
    return torch.ops.sqlscout_cpu


def library_name(level: str) -> str:
    """The library of a level: each its own file in torch's cache, so that switching levels rebuilds nothing."""
    return LIBRARY if level == isa.NATIVE else f"{LIBRARY}_{level.replace('-', '_')}"


def _level_words() -> str:
    return "this CPU" if _isa == isa.NATIVE else f"the {_isa} instruction set ({ISA_CAP_WORDS})"


ISA_CAP_WORDS = f"--cpu-isa or {isa.ENV_VAR}"


_UNBUILT = object()
# A plain global rather than a cache decorator: torch.compile reads it as a constant in a compiled step.
_ops: object | None = _UNBUILT
_isa = os.environ.get(isa.ENV_VAR, "").strip().lower() or isa.NATIVE


def set_isa(level: str) -> None:
    """Build the kernels at `level` (kernels/cpu/isa.py; `native`: this CPU's best) and cap torch's own CPU
    kernels there too. ValueError for a level this CPU cannot run, or when the kernels of another level are
    already loaded in this process."""
    global _isa
    isa.check(level)
    if _ops is not _UNBUILT and level != _isa:
        raise ValueError(f"is {level}, but this process already runs the CPU kernels built for {_isa}")
    _isa = level
    isa.cap_torch(level)


def chosen_isa() -> str:
    return _isa


def ops() -> object | None:
    """The compiled kernels (torch.ops.sqlscout_cpu), built on the first call, or None where the torch reference
    runs instead."""
    global _ops
    if get_backend() == "torch":
        return None
    if _ops is _UNBUILT:
        _ops = _build()
    return _ops


def amx_products() -> bool:
    """Whether bf16 products run on AMX tiles here: a CPU with them, a build for it, and Linux's leave."""
    compiled = ops()
    return compiled is not None and bool(compiled.amx_ready())

"""The C++ CPU kernels, compiled for this machine's CPU on first use: the weight products (weight_products.cpp)
and the fused one-token gated delta rule and attention steps of a decode token (gated_delta_step.cpp,
attention_step.cpp), one library.

torch.utils.cpp_extension builds the library once (about 10-20 s) into torch's extension cache
(TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions) and reloads it from there; a changed source or
compiler flag builds again. Without a C++ compiler, with SQLSCOUT_KERNELS=torch, or when the build fails, the
same math runs in plain PyTorch instead (kernels/reference), after a one-line notice.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

import torch

from kernels.backend import get_backend

log = logging.getLogger(__name__)

SOURCES = [
    Path(__file__).with_name(name)
    for name in ("weight_products.cpp", "gated_delta_step.cpp", "attention_step.cpp")
]
LIBRARY = "sqlscout_cpu_products"
ARM_MACHINES = ("arm64", "aarch64")
OPS = ("float_linear", "bf16_dot_linear", "int8_linear", "int4_linear", "gated_delta_step", "attention_step")


def _tuning_flag() -> str:
    # GCC on Arm spells "this CPU" -mcpu; x86 compilers -march.
    return "-mcpu=native" if platform.machine().lower() in ARM_MACHINES else "-march=native"


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
    log.info("loading the CPU kernels (compiled for this CPU on first use, about 15 s)")
    # -Wno-psabi: the vector helpers are inline and internal, so the ABI notes GCC prints are noise.
    flags = ["-O3", _tuning_flag(), "-fopenmp", "-Wno-psabi"]
    try:
        cpp_extension.load(
            name=LIBRARY,
            sources=[str(source) for source in SOURCES],
            extra_cflags=flags,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError, SystemExit) as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        log.warning(
            "the CPU kernels run in plain PyTorch (slower decoding): the C++ kernels could not be built "
            "(%s); install a C++ compiler (g++ or clang++) to build them",
            reason,
        )
        return None
    for name in OPS:
        # The ops write their outputs in place: to torch.compile they are calls that return nothing.
        torch.library.register_fake(f"sqlscout_cpu::{name}")(lambda *args: None)
    return torch.ops.sqlscout_cpu


_UNBUILT = object()
# A plain global rather than a cache decorator: torch.compile reads it as a constant in a compiled step.
_ops: object | None = _UNBUILT


def ops() -> object | None:
    """The compiled kernels (torch.ops.sqlscout_cpu), built on the first call, or None where the torch reference
    runs instead."""
    global _ops
    if get_backend() == "torch":
        return None
    if _ops is _UNBUILT:
        _ops = _build()
    return _ops

"""The instruction-set levels the CPU kernels can be built for, so that one machine runs (and tests, and benchmarks)
every path its CPU can execute: `native` (the best this CPU has, -march=native) or a cap at a lower level.

A level names the compiler flags its library is built with and the CPU features it needs (as /proc/cpuinfo spells
them). A cap also caps torch's own CPU kernels (ATen's vectorized ops, oneDNN's products) through their
environment variables, which they read when they first run.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "SQLSCOUT_CPU_ISA"
ARM_MACHINES = ("arm64", "aarch64")


@dataclass(frozen=True)
class Level:
    flags: tuple[str, ...]  # compiler flags that select the level's instructions
    needs: frozenset[str]  # /proc/cpuinfo flags the CPU must report
    aten: str  # ATEN_CPU_CAPABILITY: torch's vectorized kernels at this level
    onednn: str  # ONEDNN_MAX_CPU_ISA: oneDNN's products at this level


# Highest first. Each x86 level is a real CPU generation's set: Sapphire Rapids (AMX tiles), Cooper Lake or Zen 4
# (avx512_bf16 and VNNI), Skylake-SP (AVX-512 without either), Haswell and every laptop since (AVX2, FMA, F16C),
# and the x86-64 baseline (SSE2: the portable branch of every helper).
X86_LEVELS = {
    "amx": Level(
        ("-march=sapphirerapids",),
        frozenset({"amx_tile", "amx_bf16", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512vl"}),
        "avx512",
        "AVX512_CORE_AMX",
    ),
    "avx512-bf16": Level(
        ("-march=cooperlake",),
        frozenset({"avx512_bf16", "avx512_vnni", "avx512bw", "avx512vl", "avx512dq"}),
        "avx512",
        "AVX512_CORE_BF16",
    ),
    "avx512": Level(
        ("-march=skylake-avx512",),
        frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
        "avx512",
        "AVX512_CORE",
    ),
    "avx2": Level(("-march=haswell",), frozenset({"avx2", "fma", "f16c"}), "avx2", "AVX2"),
    "generic": Level(("-march=x86-64",), frozenset(), "default", "SSE41"),
}
ARM_LEVELS = {"generic": Level(("-march=armv8-a",), frozenset(), "default", "ALL")}
NATIVE = "native"


def levels() -> dict[str, Level]:
    """The levels of this machine's architecture, highest first."""
    return ARM_LEVELS if platform.machine().lower() in ARM_MACHINES else X86_LEVELS


def native_flags() -> tuple[str, ...]:
    # GCC on Arm spells "this CPU" -mcpu; x86 compilers -march.
    return ("-mcpu=native",) if platform.machine().lower() in ARM_MACHINES else ("-march=native",)


def cpu_features() -> frozenset[str] | None:
    """The CPU's feature flags as Linux reports them; None where /proc/cpuinfo does not say (macOS, Windows)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith(("flags", "Features"))), "")
    return frozenset(line.partition(":")[2].split())


def runnable() -> list[str]:
    """The levels this CPU can execute, highest first (every level where the CPU does not report its features)."""
    features = cpu_features()
    return [name for name, level in levels().items() if features is None or level.needs <= features]


def check(name: str) -> None:
    """Refuse a level this architecture lacks or this CPU cannot execute; the message names what is missing."""
    if name == NATIVE:
        return
    if name not in levels():
        raise ValueError(
            f"is {name!r}, which this machine's architecture has no build for: choose {NATIVE} or one of "
            f"{', '.join(levels())}"
        )
    features = cpu_features()
    missing = sorted(levels()[name].needs - features) if features is not None else []
    if missing:
        raise ValueError(
            f"is {name}, but this CPU lacks {', '.join(missing)}: it runs {', '.join(runnable())}"
        )


def compile_flags(name: str) -> tuple[str, ...]:
    return native_flags() if name == NATIVE else levels()[name].flags


def environment(name: str) -> dict[str, str]:
    """The variables that run a process at level `name`: the kernels' own, and torch's caps for its CPU kernels
    (ATen's vectorized ops, oneDNN's products), which they read when they first run."""
    if name == NATIVE:
        return {ENV_VAR: NATIVE}
    level = levels()[name]
    return {ENV_VAR: name, "ATEN_CPU_CAPABILITY": level.aten, "ONEDNN_MAX_CPU_ISA": level.onednn}


def cap_torch(name: str) -> None:
    """Cap torch's own CPU kernels at the level too (where the environment does not already), so that a capped
    run measures that level's machine and not a mix."""
    for variable, value in environment(name).items():
        if variable != ENV_VAR:
            os.environ.setdefault(variable, value)


def allows(feature_level: str, name: str) -> bool:
    """Whether code built at level `name` may use what `feature_level` brings (native allows all)."""
    order = list(levels())
    if name == NATIVE or feature_level not in order:
        return name == NATIVE
    return order.index(name) <= order.index(feature_level)

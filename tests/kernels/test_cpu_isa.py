"""The CPU kernels at every instruction-set level this machine can execute (kernels/cpu/isa.py): each level's build
checked against the torch reference with NaN-poisoned outputs, the instructions it uses, and the cap as the engine
takes it (refused where the CPU lacks the level)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernels import cpu as cpu_kernels
from kernels.cpu import isa
from model.engine_options import CPU_ISAS, EngineOptions
from model.errors import OptionError
from tests.kernels.test_kernel_builds import COMPILES_AT_ONCE, run_at_most

ROOT = Path(__file__).resolve().parents[2]
# What each level's build must report using, and what it must not.
INSTRUCTIONS = {
    "amx": (["AMX tiles", "avx512_bf16", "avx512_vnni", "AVX-512"], []),
    "avx512-bf16": (["avx512_bf16", "avx512_vnni", "AVX-512"], ["AMX"]),
    "avx512": (["AVX-512", "F16C"], ["AMX", "avx512_bf16", "vnni"]),
    "avx2": (["AVX2", "F16C"], ["AMX", "AVX-512", "avx512", "vnni"]),
    "generic": (["no vector extension"], ["AVX", "F16C"]),
}


def test_the_flag_offers_every_level_of_the_kernels():
    assert CPU_ISAS == (isa.NATIVE, *isa.X86_LEVELS)
    assert set(INSTRUCTIONS) == set(isa.X86_LEVELS)
    assert set(isa.ARM_LEVELS) <= set(isa.X86_LEVELS)


@pytest.fixture(scope="module")
def level_checks(request, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """tests/kernels/other_isa_products.py for each level this CPU runs that a selected test checks, a few at a
    time (test_kernel_builds.COMPILES_AT_ONCE): each is a compile of its own."""
    selected = {"avx2"} | {
        item.callspec.params["level"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_every_other_level_matches_the_reference"
    }
    levels = [level for level in isa.runnable() if level in selected]
    commands = [
        [sys.executable, "-m", "tests.kernels.other_isa_products", level, str(tmp_path_factory.mktemp(level))]
        for level in levels
    ]
    done = run_at_most(COMPILES_AT_ONCE, commands)
    return dict(zip(levels, done, strict=True))


def check_level(level: str, level_checks) -> None:
    if level not in isa.runnable():
        pytest.skip(f"this CPU cannot run {level} code: it lacks {', '.join(sorted(missing(level)))}")
    run = level_checks[level]
    assert run.returncode == 0, run.stderr[-3000:]
    used, worst = run.stdout.strip().splitlines()[-2:]
    present, absent = INSTRUCTIONS[level]
    assert all(name in used for name in present) and not any(name in used for name in absent), used
    assert float(worst) < 1e-5


def missing(level: str) -> frozenset[str]:
    return isa.X86_LEVELS[level].needs - (isa.cpu_features() or frozenset())


def test_the_avx2_build_matches_the_reference(level_checks):
    """Most laptops' instruction set, in the fast tier."""
    check_level("avx2", level_checks)


# Slow (left out of the fast tier): builds the C++ kernels once more per instruction-set level.
@pytest.mark.slow
@pytest.mark.parametrize("level", [level for level in isa.X86_LEVELS if level != "avx2"])
def test_every_other_level_matches_the_reference(level, level_checks):
    check_level(level, level_checks)


def test_a_level_the_cpu_lacks_is_refused_naming_what_is_missing(monkeypatch):
    monkeypatch.setattr(isa, "cpu_features", lambda: frozenset({"avx2", "fma", "f16c"}))
    with pytest.raises(
        ValueError, match=r"is amx, but this CPU lacks amx_bf16, amx_tile, .*: it runs avx2, generic"
    ):
        cpu_kernels.set_isa("amx")
    assert cpu_kernels.chosen_isa() == isa.NATIVE
    with pytest.raises(ValueError, match=r"no build for: choose native or one of amx, .*generic"):
        isa.check("neon")


def test_another_level_once_the_kernels_are_loaded_is_refused():
    if cpu_kernels.ops() is None:
        pytest.skip("no C++ compiler: the kernels are not built here")
    lower = next(level for level in isa.runnable() if level != cpu_kernels.chosen_isa())
    with pytest.raises(
        ValueError, match=f"is {lower}, but this process already runs the CPU kernels built for"
    ):
        cpu_kernels.set_isa(lower)


def test_levels_allow_what_they_build_with():
    assert isa.allows("avx512-bf16", "amx") and isa.allows("avx512-bf16", "avx512-bf16")
    assert not isa.allows("avx512-bf16", "avx512") and not isa.allows("amx", "avx512-bf16")
    assert isa.allows("amx", isa.NATIVE)


def test_the_cap_is_an_option_of_the_cpu_only():
    with pytest.raises(OptionError, match="cpu_isa must be one of native, amx"):
        EngineOptions(cpu_isa="sse9")
    with pytest.raises(OptionError) as refused:
        EngineOptions(device="cuda", cpu_isa="avx2")
    assert refused.value.flag_message.startswith("--cpu-isa caps the CPU kernels")

"""What the engine picks on a CPU by itself: bf16 only where the CPU multiplies it natively, one torch thread per
physical core, each said once in the log."""

from __future__ import annotations

import logging
import types

import pytest
import torch

import model.cpu as cpu
from model.cpu import default_dtype, set_cpu_threads
from model.engine import Engine
from model.engine_options import EngineOptions


def _fake_cpu(monkeypatch, machine: str, **checks: bool) -> None:
    monkeypatch.setattr(cpu.platform, "machine", lambda: machine)
    fake = types.SimpleNamespace(**{name: (lambda value=value: value) for name, value in checks.items()})
    monkeypatch.setattr(cpu.torch, "cpu", fake)


@pytest.mark.parametrize(
    ("checks", "native"),
    [
        ({"_is_avx512_bf16_supported": True, "_is_amx_tile_supported": False}, True),
        ({"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": True}, True),
        # Plain AVX-512 (oneDNN would emulate bf16 there) is not native.
        (
            {
                "_is_avx512_bf16_supported": False,
                "_is_amx_tile_supported": False,
                "_is_avx512_supported": True,
            },
            False,
        ),
        ({}, False),  # a torch without the checks
    ],
)
def test_x86_bf16_is_native_with_avx512_bf16_or_amx(monkeypatch, checks, native):
    _fake_cpu(monkeypatch, "x86_64", **checks)
    assert cpu.native_bf16() is native


@pytest.mark.parametrize("has_bf16", [True, False])
def test_arm_bf16_is_native_with_the_bf16_extension(monkeypatch, has_bf16):
    _fake_cpu(monkeypatch, "aarch64", _is_avx512_bf16_supported=True)
    monkeypatch.setattr(cpu.torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(
        cpu.torch.ops, "mkldnn", types.SimpleNamespace(_is_mkldnn_bf16_supported=lambda: has_bf16)
    )
    assert cpu.native_bf16() is has_bf16


@pytest.mark.parametrize(("native", "expected"), [(True, torch.bfloat16), (False, torch.float32)])
def test_cpu_default_dtype_follows_native_bf16_and_a_gpu_always_gets_bf16(monkeypatch, native, expected):
    monkeypatch.setattr(cpu, "native_bf16", lambda: native)
    assert default_dtype(torch.device("cpu")) == expected
    assert default_dtype(torch.device("cuda")) == torch.bfloat16


def test_load_logs_the_chosen_dtype_once_and_a_given_dtype_wins(monkeypatch, caplog, checkpoint_dirs):
    monkeypatch.setattr(cpu, "native_bf16", lambda: True)
    with caplog.at_level(logging.INFO, logger="model.cpu"):
        chosen = Engine.load(checkpoint_dirs["text_mqa"], EngineOptions(device="cpu", max_context=64))
    said = [r.getMessage() for r in caplog.records if "on the CPU" in r.getMessage()]
    assert chosen.dtype == torch.bfloat16
    assert said == ["computing in bfloat16 on the CPU: the CPU multiplies bf16 natively (--dtype overrides)"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="model.cpu"):
        given = Engine.load(
            checkpoint_dirs["text_mqa"], EngineOptions(device="cpu", dtype="float32", max_context=64)
        )
    assert given.dtype == torch.float32
    assert not [r for r in caplog.records if "on the CPU" in r.getMessage()]


def _fake_topology(monkeypatch, tmp_path, cores: dict[int, tuple[int, int]]) -> None:
    """Logical CPU -> (package, core) in a fake sysfs."""
    for logical, (package, core) in cores.items():
        topology = tmp_path / f"cpu{logical}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    monkeypatch.setattr(cpu, "SYSFS_CPUS", tmp_path)
    monkeypatch.setattr(cpu.os, "sched_getaffinity", lambda _: set(cores), raising=False)


def test_hyperthread_siblings_count_as_one_core(monkeypatch, tmp_path):
    # Two packages of two cores, each core with two hyperthreads.
    _fake_topology(monkeypatch, tmp_path, {i: (i // 4, (i % 4) // 2) for i in range(8)})
    assert cpu.physical_cores() == 4


def test_only_the_cores_this_process_may_use_count(monkeypatch, tmp_path):
    _fake_topology(monkeypatch, tmp_path, {0: (0, 0), 1: (0, 0), 5: (0, 2)})
    assert cpu.physical_cores() == 2


def test_threads_default_to_the_physical_cores_unless_omp_decides(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(cpu, "physical_cores", lambda: 1)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        assert set_cpu_threads(None) == 1
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert set_cpu_threads(None) == 2
        assert set_cpu_threads(1) == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="threads must be at least 1, not 0"):
        EngineOptions(threads=0)

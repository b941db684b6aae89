"""Each kind of CPU keeps its own real-size section: native bf16 (with AMX or without), else by the width of its
vectors."""

import pytest
import torch

from benchmarks import model_cpu


@pytest.mark.parametrize(
    ("native", "amx", "capability", "kind"),
    [
        (True, False, "AVX512", ("native bf16", "bf16")),
        (True, True, "AVX512", ("native bf16 and AMX", "amx")),
        (False, False, "AVX512", ("AVX-512, no native bf16", "avx512")),
        (False, False, "AVX2", ("AVX2, no AVX-512", "avx2")),
        (False, False, "SVE256", ("SVE256, no native bf16", "sve256")),
    ],
)
def test_the_section_and_files_follow_the_cpu_kind(monkeypatch, native, amx, capability, kind):
    monkeypatch.setattr(model_cpu, "native_bf16", lambda: native)
    monkeypatch.setattr(model_cpu, "amx_tiles", lambda: amx)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert model_cpu.real_size_kind() == kind
    title, raw, plot = model_cpu.real_size_outputs()
    assert title.endswith(f"(CPU, {kind[0]})")
    assert (raw.name, plot.name) == (
        f"model_cpu_real_size_{kind[1]}.json",
        f"model_cpu_real_size_{kind[1]}.png",
    )

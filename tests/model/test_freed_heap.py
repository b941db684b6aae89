"""Memory a CPU load frees on the C heap goes back to the system: glibc would keep it resident for reuse."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

import model.engine as engine_module
from model.cpu import release_freed_heap
from model.engine import Engine
from model.engine_options import EngineOptions


def _anonymous_resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "malloc_trim"),
    reason="the freed heap is handed back by glibc's malloc_trim",
)
def test_memory_freed_on_the_heap_is_handed_back():
    # Freeing a 20 MB block raises glibc's mmap threshold, so the next 16 MB blocks come from the heap, where
    # freed ones stay resident for reuse; the last one, kept, stops the heap from shrinking on its own.
    large = torch.ones(20 << 20, dtype=torch.uint8)
    del large
    blocks = [torch.ones(16 << 20, dtype=torch.uint8) for _ in range(40)]
    kept = blocks.pop()
    before = _anonymous_resident_mb()
    del blocks
    held = _anonymous_resident_mb()
    release_freed_heap()
    after = _anonymous_resident_mb()
    assert held > before - 100, "the freed blocks left the process without being handed back: nothing to test"
    assert after < held - 500, f"{held:.0f} MB resident before, {after:.0f} MB after"
    assert int(kept[-1]) == 1


def test_a_cpu_load_hands_back_what_it_freed(monkeypatch, checkpoint_dirs):
    calls = []
    monkeypatch.setattr(engine_module, "release_freed_heap", lambda: calls.append("released"))
    Engine.load(checkpoint_dirs["text_mqa"], EngineOptions(device="cpu", max_context=64))
    assert calls == ["released"]

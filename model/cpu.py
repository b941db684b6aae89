"""What this machine's CPU offers the engine (native bf16 arithmetic, physical cores) and the defaults drawn from
it: the activations' dtype and torch's thread count; running parallel work where it leaves no OpenMP team; and
handing memory freed on the C heap back to the system."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from kernels import cpu as cpu_kernels
from kernels.cpu import isa

log = logging.getLogger(__name__)
T = TypeVar("T")

SYSFS_CPUS = Path("/sys/devices/system/cpu")


def native_bf16() -> bool:
    """Whether the CPU multiplies bf16 natively: avx512_bf16 or AMX on x86, the BF16 extension on Arm; and
    --cpu-isa leaves them to the engine.

    Without it torch widens every bf16 operand in software: a bf16 matrix product then runs several times
    slower than fp32 (prefill), which the halved weight bytes of a decode step do not make up for.
    """
    level = cpu_kernels.chosen_isa()
    if platform.machine().lower() in isa.ARM_MACHINES:
        # On Arm oneDNN's bf16 check is the BF16 extension itself; on x86 it accepts plain AVX-512.
        supported = torch.backends.mkldnn.is_available() and bool(
            torch.ops.mkldnn._is_mkldnn_bf16_supported()
        )
        return supported and level == isa.NATIVE
    return isa.allows("avx512-bf16", level) and (_torch_cpu_has("_is_avx512_bf16_supported") or amx_tiles())


def amx_tiles() -> bool:
    """Whether the CPU has AMX's matrix tiles (Intel Xeons since Sapphire Rapids), which oneDNN's bf16 products
    run on, and --cpu-isa leaves them to the engine."""
    return isa.allows("amx", cpu_kernels.chosen_isa()) and _torch_cpu_has("_is_amx_tile_supported")


def _torch_cpu_has(check: str) -> bool:
    """torch.cpu's answer to one of its feature checks; False where this torch lacks the check."""
    return bool(getattr(getattr(torch, "cpu", None), check, lambda: False)())


def physical_cores() -> int:
    """Physical cores this process may run on: hyperthread siblings share one core's memory bandwidth and
    vector units, so a memory-bound decode gains nothing from them and loses to their synchronisation."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = _linux_cores(allowed) if allowed else 0
    if not cores and platform.system() == "Darwin":
        cores = _sysctl_int("hw.physicalcpu")
    return cores or len(allowed) or os.cpu_count() or 1


def _linux_cores(cpus: list[int]) -> int:
    """Distinct (package, core) pairs among cpus, read from sysfs; 0 when sysfs does not say."""
    pairs = set()
    for cpu in cpus:
        topology = SYSFS_CPUS / f"cpu{cpu}" / "topology"
        try:
            pairs.add(
                (
                    (topology / "physical_package_id").read_text().strip(),
                    (topology / "core_id").read_text().strip(),
                )
            )
        except OSError:
            return 0
    return len(pairs)


def _sysctl_int(name: str) -> int:
    try:
        return int(subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, check=True).stdout)
    except (OSError, ValueError, subprocess.CalledProcessError):
        return 0


def default_dtype(device: torch.device) -> torch.dtype:
    """The activations' dtype: bf16 on a GPU and on a CPU that multiplies bf16 natively; else fp32. Either way a
    CPU keeps the weights as the checkpoint stores them (bf16) and its decode products widen them in registers
    (model/cpu_weights.py), so fp32 activations cost no weight bytes."""
    return torch.bfloat16 if device.type == "cuda" or native_bf16() else torch.float32


def chosen_dtype(device: torch.device) -> torch.dtype:
    """default_dtype(device), logged with the reason on a CPU (where the choice depends on the machine)."""
    dtype = default_dtype(device)
    if device.type == "cpu":
        why = (
            "the CPU multiplies bf16 natively"
            if dtype == torch.bfloat16
            else "the CPU has no native bf16 (avx512_bf16, AMX or Arm BF16), so bf16 products would run slower"
        )
        log.info("computing in %s on the CPU: %s (--dtype overrides)", str(dtype).removeprefix("torch."), why)
    return dtype


def set_cpu_threads(threads: int | None) -> int:
    """Give torch `threads` threads, or one per physical core unless OMP_NUM_THREADS already decided; returns
    the count in use (EngineOptions checks the count)."""
    if threads is None and "OMP_NUM_THREADS" not in os.environ:
        threads = physical_cores()
    if threads is not None:
        torch.set_num_threads(threads)
    count = torch.get_num_threads()
    log.info("running on %d CPU thread%s (--threads overrides)", count, "" if count == 1 else "s")
    return count


def on_a_thread_of_its_own(work: Callable[[], T]) -> T:
    """work()'s result (or its exception), run on a thread that ends when it returns.

    libgomp keeps an OpenMP team for every thread that has run a parallel region, until the thread ends, and once
    the teams' threads outnumber the cores it stops letting idle workers spin: every parallel region of another
    thread then waits for its workers to wake, about 50 us more a region on 2 cores. Loaded on the main thread,
    an engine that decodes on the serving scheduler's thread lost a fifth of its int4 decode speed (14.4 against
    18.2 tokens/s with 2 threads). Work run here leaves no team behind.
    """
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the caller, whatever it is
            outcome["error"] = error

    # A daemon thread: Ctrl-C stops the caller's wait at once, and the process need not wait for the work.
    thread = threading.Thread(target=run, name="sqlscout-cpu-work", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def release_freed_heap() -> None:
    """Hand the C heap's free memory back to the system (glibc; elsewhere nothing). glibc keeps freed blocks below
    its mmap threshold, which rises to 32 MB as larger blocks are freed, for reuse: a load frees a copy of most
    matrices there (the checkpoint's dense rows, the layouts' originals once moved into one block), which
    otherwise stayed resident (Qwen3.5-2B's bf16 weights: 5.05 GB resident after the load against 3.98)."""
    if not sys.platform.startswith("linux"):
        return
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)

"""Launch settings of every Triton kernel, chosen from the GPU that runs it, and the one call they launch through.

Tiles, warps and pipeline stages (a `triton.Config` per kernel, cached per argument) follow the device's opt-in
shared memory per block (99 KB on sm_86, sm_89 and sm_120 cards, 163 KB on sm_80, 227 KB on sm_90 and sm_100)
and keep registers from spilling; under the interpreter every kernel gets one small configuration. Inside
`planning(gpu)` launches are recorded for that GPU instead of run, which is how `benchmarks.kernels.resources`
compiles them ahead of time for each target.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import triton

from kernels.backend import interpreting
from kernels.checks import check_last_dim_contiguous, check_shape

# Opt-in shared memory per block by compute capability (the CUDA programming guide's table), for devices whose
# properties do not report it; an unknown capability gets the smallest of these.
SHARED_BYTES_BY_CAPABILITY = {
    80: 166_912,  # A100
    86: 101_376,  # RTX 30xx, A10, A40
    87: 166_912,  # Jetson Orin
    89: 101_376,  # RTX 40xx, L4, L40
    90: 232_448,  # H100, H200
    100: 232_448,  # B200
    120: 101_376,  # RTX 50xx, RTX PRO 6000
}
# Shared memory a kernel needs beyond its staged tiles: reductions, layout conversions, barriers.
SCRATCH_BYTES = 4096
MAX_ROW_BLOCK = 65536


@dataclass(frozen=True)
class Gpu:
    """What the launch settings depend on: compute capability (0 under the interpreter), shared memory, SMs."""

    capability: int
    shared_bytes: int
    multiprocessors: int

    @property
    def interpreted(self) -> bool:
        return self.capability == 0


INTERPRETER = Gpu(capability=0, shared_bytes=0, multiprocessors=2)


def gpu_for(capability: int, multiprocessors: int) -> Gpu:
    """A GPU of that compute capability (e.g. 86) with the shared memory the capability's table gives."""
    shared = SHARED_BYTES_BY_CAPABILITY.get(capability, min(SHARED_BYTES_BY_CAPABILITY.values()))
    return Gpu(capability, shared, multiprocessors)


@functools.lru_cache(maxsize=16)
def _cuda_gpu(index: int) -> Gpu:
    props = torch.cuda.get_device_properties(index)
    gpu = gpu_for(props.major * 10 + props.minor, props.multi_processor_count)
    reported = getattr(props, "shared_memory_per_block_optin", 0)
    return Gpu(gpu.capability, reported or gpu.shared_bytes, gpu.multiprocessors)


def gpu_of(device: torch.device) -> Gpu:
    """The GPU a kernel on `device` runs on: the planned one, the interpreter, or the CUDA device's properties."""
    if _plan is not None:
        return _plan.gpu
    if interpreting() or device.type != "cuda":
        return INTERPRETER
    return _cuda_gpu(device.index if device.index is not None else torch.cuda.current_device())


def _stage_copies(gpu: Gpu, stages: int, warpgroup_dots: bool) -> int:
    """Copies of the streamed tiles a software pipeline of `stages` keeps in shared memory: one per stage where
    Hopper's and Blackwell's warpgroup MMAs read them (sm_90 and sm_100, dots of 64 rows or more), one fewer
    where cp.async feeds mma.sync (sm_8x, sm_120, and smaller dots anywhere)."""
    return stages if warpgroup_dots and 90 <= gpu.capability < 120 else stages - 1


def _fits(gpu: Gpu, resident_bytes: int, stage_bytes: int, stages: int, warpgroup_dots: bool) -> bool:
    """Whether the tiles a kernel keeps in shared memory and the pipeline's copies of its streamed tiles fit."""
    copies = _stage_copies(gpu, stages, warpgroup_dots)
    return resident_bytes + copies * stage_bytes + SCRATCH_BYTES <= gpu.shared_bytes


def _most_stages(gpu: Gpu, resident_bytes: int, stage_bytes: int, most: int, warpgroup_dots: bool) -> int:
    """The most pipeline stages from `most` down to 3 that fit, else 2 (which the caller checks)."""
    fitting = (s for s in range(most, 2, -1) if _fits(gpu, resident_bytes, stage_bytes, s, warpgroup_dots))
    return next(fitting, 2)


@functools.cache
def row_config(n_cols: int) -> triton.Config:
    """A kernel holding one whole row of n_cols elements in registers (the norms): BLOCK and warps by row size."""
    block = triton.next_power_of_2(n_cols)
    if block > MAX_ROW_BLOCK:
        raise ValueError(
            f"rows of {n_cols} elements exceed the {MAX_ROW_BLOCK}-element limit of the row kernels"
        )
    num_warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    return triton.Config({"BLOCK": block}, num_warps=num_warps)


@functools.cache
def swiglu_config() -> triton.Config:
    return triton.Config({"BLOCK": 1024}, num_warps=4)


@functools.cache
def rotary_config(head_dim: int) -> triton.Config:
    """One (token, head) row per program; at head_dim 256 four warps (on two, ptxas spills a word in decode)."""
    return triton.Config({"BLOCK_D": triton.next_power_of_2(head_dim)}, num_warps=1 if head_dim <= 128 else 4)


@functools.cache
def conv_config() -> triton.Config:
    """The causal conv1d: BLOCK_T tokens x BLOCK_C channels per program."""
    return triton.Config({"BLOCK_T": 16, "BLOCK_C": 128}, num_warps=4)


@functools.cache
def conv_state_config() -> triton.Config:
    return triton.Config({"BLOCK_C": 128}, num_warps=4)


@functools.cache
def decode_attention_config(gpu: Gpu, head_dim: int, itemsize: int) -> triton.Config:
    """The split-KV decode kernel on four warps: 64 keys per step in up to 3 stages of K and V tiles as the
    shared memory holds (3 take 141 KB at head_dim 256 in bf16: 2 on a 99 KB card); fewer keys per step where
    even 2 stages do not fit (fp32 tiles on a 99 KB card). Its dots have 16 rows, never warpgroup MMAs."""
    if gpu.interpreted:
        return triton.Config({"BLOCK_N": 64}, num_warps=4, num_stages=1)
    block_d = triton.next_power_of_2(head_dim)
    query = 16 * block_d * itemsize
    for block_n in (64, 32, 16):
        key_values = 2 * block_n * block_d * itemsize
        stages = _most_stages(gpu, query, key_values, most=3, warpgroup_dots=False)
        if _fits(gpu, query, key_values, stages, warpgroup_dots=False):
            break
    return triton.Config({"BLOCK_N": block_n}, num_warps=4, num_stages=stages)


@functools.cache
def decode_combine_config() -> triton.Config:
    return triton.Config({"SPLITS_PER_STEP": 8}, num_warps=4)


# (BLOCK_M, BLOCK_N, warps) the prefill autotuner picks from: the tiles that keep head_dim 256 from spilling on
# every target (64 x 64 tiles, 128-query tiles and 64-query tiles on four warps spill 16-280 bytes).
PREFILL_TILES = ((64, 32, 8), (64, 16, 8), (32, 32, 4))


def prefill_attention_configs(gpu: Gpu, head_dim: int, itemsize: int) -> list[triton.Config]:
    """The prefill kernel's autotuning candidates that fit the GPU's shared memory, each with up to 3 stages:
    a query tile stays in shared memory while K and V tiles stream through the stages."""
    if gpu.interpreted:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    block_d = triton.next_power_of_2(head_dim)
    configs = []
    for block_m, block_n, num_warps in PREFILL_TILES:
        resident, stage = block_m * block_d * itemsize, 2 * block_n * block_d * itemsize
        stages = _most_stages(gpu, resident, stage, most=3, warpgroup_dots=block_m >= 64)
        if _fits(gpu, resident, stage, stages, warpgroup_dots=block_m >= 64):
            tiles = {"BLOCK_M": block_m, "BLOCK_N": block_n}
            configs.append(triton.Config(tiles, num_warps=num_warps, num_stages=stages))
    # None fits only with fp32 tiles on a 99 KB card: the smallest tiles do.
    return configs or [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=2)]


def sequence_bucket(seq_len: int) -> int:
    """The autotuners' key for a sequence length: the next power of two, from 64 to 16384."""
    return min(max(triton.next_power_of_2(seq_len), 64), 16384)


@functools.cache
def gdn_recurrent_config(gpu: Gpu, value_dim: int) -> triton.Config:
    """The recurrent step: a dk x BV slice of the fp32 state per program, held in registers."""
    return triton.Config({"BV": value_dim if gpu.interpreted else min(value_dim, 16)}, num_warps=4)


@functools.cache
def gdn_inverse_config() -> triton.Config:
    return triton.Config({}, num_warps=4)


@functools.cache
def gdn_prepare_config() -> triton.Config:
    """Per chunk, the 64 x 128 fp32 tiles of q, k and v and the 64 x 64 inverse: eight warps hold them."""
    return triton.Config({}, num_warps=8)


@functools.cache
def gdn_scan_config(gpu: Gpu, value_dim: int) -> triton.Config:
    """The chunk scan: a dk x BV state slice per program, one stage (its fp32 dot operands, 64 x 128 tiles, are
    staged in shared memory: 80 KB on sm_8x, 120 KB with Hopper's wgmma)."""
    block_v = value_dim if gpu.interpreted else min(value_dim, 16)
    return triton.Config({"BV": block_v}, num_warps=8, num_stages=1)


def as_rows(name: str, t: torch.Tensor) -> torch.Tensor:
    """A [rows, cols] view of t (a copy only when the leading dims cannot merge) with a unit last stride."""
    check_last_dim_contiguous(**{name: t})
    return t.reshape(-1, t.shape[-1])


def output_like(x: torch.Tensor, out: torch.Tensor | None, name: str = "out") -> torch.Tensor:
    """A new contiguous tensor shaped like x, or the caller's `out` after checking it fits."""
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    check_shape(name, out, tuple(x.shape), "the input's shape")
    if not out.is_contiguous() or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{name} must be contiguous with dtype {x.dtype} on {x.device}")
    return out


Grid = tuple[int, ...] | Callable[[dict], tuple[int, ...]]


@dataclass
class PlannedLaunch:
    """A launch recorded by `planning`: the kernel, its runtime arguments and constexprs, settings and grid."""

    kernel: triton.JITFunction
    args: tuple
    constexprs: dict
    config: triton.Config
    grid: tuple[int, ...]


@dataclass
class _Plan:
    gpu: Gpu
    launches: list[PlannedLaunch]


_plan: _Plan | None = None


@contextlib.contextmanager
def planning(gpu: Gpu) -> Iterator[list[PlannedLaunch]]:
    """Within the block, launchers choose their settings for `gpu` and record their launches instead of running
    them (call them on meta tensors); an autotuned kernel records one launch per candidate. Not thread-safe."""
    global _plan
    previous = _plan
    _plan = _Plan(gpu, [])
    try:
        yield _plan.launches
    finally:
        _plan = previous


def _options(config: triton.Config) -> dict:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def _record(
    kernel: triton.JITFunction, grid: Grid, args: tuple, constexprs: dict, config: triton.Config
) -> None:
    assert _plan is not None
    resolved = grid({**constexprs, **config.kwargs}) if callable(grid) else grid
    _plan.launches.append(PlannedLaunch(kernel, args, constexprs, config, tuple(resolved)))


def run(kernel: triton.JITFunction, grid: Grid, args: tuple, constexprs: dict, config: triton.Config) -> None:
    """kernel[grid](*args, **constexprs) with the config's block sizes, warps and stages."""
    if _plan is not None:
        _record(kernel, grid, args, constexprs, config)
    else:
        kernel[grid](*args, **constexprs, **_options(config))


def run_tuned(tuner: triton.runtime.Autotuner, grid: Grid, args: tuple, constexprs: dict) -> None:
    """tuner[grid](*args, **constexprs): the autotuner picks among its configs per key."""
    if _plan is not None:
        for config in tuner.configs:
            _record(tuner.fn, grid, args, constexprs, config)
    else:
        tuner[grid](*args, **constexprs)

"""Launch settings follow the GPU's shared memory, and `planning` records launches for a GPU without running them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kernels import backend
from kernels.ops import launch
from kernels.ops.attention_decode import attention_decode_triton
from kernels.ops.attention_prefill import _tuned_kernel, attention_prefill_triton

CAPABILITIES = sorted(launch.SHARED_BYTES_BY_CAPABILITY)


@pytest.mark.parametrize(
    ("capability", "shared"), [(80, 166_912), (86, 101_376), (89, 101_376), (90, 232_448), (120, 101_376)]
)
def test_shared_memory_by_compute_capability(capability, shared):
    assert launch.gpu_for(capability, 100).shared_bytes == shared


def test_an_unknown_capability_gets_the_smallest_shared_memory():
    assert launch.gpu_for(95, 100).shared_bytes == min(launch.SHARED_BYTES_BY_CAPABILITY.values())


@pytest.mark.parametrize("reported", [99 * 1024, None])
def test_the_device_reports_its_shared_memory(monkeypatch, reported):
    props = SimpleNamespace(major=8, minor=9, multi_processor_count=58)
    if reported is not None:
        props.shared_memory_per_block_optin = reported
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    gpu = launch._cuda_gpu.__wrapped__(0)
    assert gpu == launch.Gpu(89, reported or 101_376, 58)


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("capability", CAPABILITIES)
def test_attention_tiles_fit_the_shared_memory(capability, itemsize):
    gpu, head_dim = launch.gpu_for(capability, 100), 256
    decode = launch.decode_attention_config(gpu, head_dim, itemsize)
    key_values = 2 * decode.kwargs["BLOCK_N"] * head_dim * itemsize
    assert launch._fits(gpu, 16 * head_dim * itemsize, key_values, decode.num_stages, warpgroup_dots=False)
    prefill = launch.prefill_attention_configs(gpu, head_dim, itemsize)
    assert prefill
    for config in prefill:
        block_m = config.kwargs["BLOCK_M"]
        stage = 2 * config.kwargs["BLOCK_N"] * head_dim * itemsize
        assert launch._fits(gpu, block_m * head_dim * itemsize, stage, config.num_stages, block_m >= 64)


def test_smaller_shared_memory_gets_fewer_stages():
    consumer, hopper = launch.gpu_for(89, 128), launch.gpu_for(90, 132)
    assert launch.decode_attention_config(consumer, 256, 2).num_stages == 2
    assert launch.decode_attention_config(hopper, 256, 2).num_stages == 3
    assert launch.prefill_attention_configs(consumer, 256, 2)[0].num_stages == 2


def test_the_interpreter_gets_one_prefill_config():
    assert len(launch.prefill_attention_configs(launch.INTERPRETER, 256, 2)) == 1


@pytest.mark.parametrize(
    ("length", "bucket"), [(1, 64), (300, 512), (2048, 2048), (2049, 4096), (10**6, 16384)]
)
def test_sequence_bucket(length, bucket):
    assert launch.sequence_bucket(length) == bucket


def test_prefill_autotunes_per_sequence_bucket():
    tuner = _tuned_kernel(launch.gpu_for(90, 132), 256, 2)
    assert "seq_bucket" in tuner.keys
    assert len(tuner.configs) == len(launch.PREFILL_TILES)


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_planning_records_decode_launches_for_the_gpu():
    gpu = launch.gpu_for(86, 82)
    q, gate = _meta(1, 1, 8, 256), _meta(1, 1, 8, 256)
    caches = _meta(1, 2, 4097, 256), _meta(1, 2, 4097, 256)
    with launch.planning(gpu) as launches:
        assert launch.gpu_of(q.device) == gpu
        attention_decode_triton(q, *caches, gate, _meta(1, dtype=torch.int64), 0.0625)
    split, combine = launches
    assert split.config.num_stages == 2 and split.config.kwargs["BLOCK_N"] == 64
    # Two waves over 82 SMs would be 82 splits per KV head; a 4,097-token cache has 65 blocks of 64 keys.
    assert split.grid == (2, 65)
    assert combine.grid == (8,)
    assert launch.gpu_of(q.device) == launch.INTERPRETER


def test_planning_records_every_prefill_candidate():
    q = _meta(1, 2048, 8, 256)
    caches = _meta(1, 2, 2049, 256), _meta(1, 2, 2049, 256)
    with launch.planning(launch.gpu_for(90, 132)) as launches:
        attention_prefill_triton(q, *caches, q, _meta(1, dtype=torch.int64), 0.0625)
    assert [p.config.kwargs["BLOCK_M"] for p in launches] == [tile[0] for tile in launch.PREFILL_TILES]
    assert launches[0].grid == (2048 // launch.PREFILL_TILES[0][0], 8)


@pytest.mark.parametrize(("capability", "expected"), [((7, 5), False), ((8, 0), True), ((12, 0), True)])
def test_auto_backend_needs_bf16_tensor_cores(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability)
    assert backend._has_bf16_tensor_cores.__wrapped__(0) is expected

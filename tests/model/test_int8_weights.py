"""Int8 weight-only quantization: the per-row scales, the matmul on every path against a dequantized reference,
and load-time quantization of both checkpoint layouts."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from model.engine import INT8_CACHE, Engine
from model.int8_weights import KERNEL_MAX_ROWS, Int8Weight, quantize_int8
from model.linear import linear
from model.loader import is_quantized


def _weight(rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator) * 0.02
    weight[rows // 2] *= 40  # one row of much larger values: its scale must not leak into the others
    return weight


def test_each_row_maps_its_largest_magnitude_to_127_and_rounds_to_the_nearest_step():
    weight = _weight(37, 48)
    quantized = quantize_int8(weight)
    assert quantized.values.dtype == torch.int8 and quantized.scales.dtype == torch.bfloat16
    assert (quantized.values.abs().amax(dim=1) >= 126).all()
    step = quantized.scales.float()[:, None]
    assert ((quantized.dequantize(torch.float32) - weight).abs() <= step / 2 + 1e-7).all()


def test_a_zero_row_stays_zero():
    weight = _weight(8, 32)
    weight[3] = 0
    quantized = quantize_int8(weight)
    assert torch.isfinite(quantized.scales.float()).all()
    assert (quantized.dequantize(torch.float32)[3] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("rows", "columns", "batch"),
    [
        (37, 48, (1, 1)),  # one decode token: torch's int8 kernel
        (37, 48, (3, 1)),  # a batched decode step
        (1029, 64, (1, KERNEL_MAX_ROWS + 5)),  # a prefill: dense blocks, the last one partial
        (37, 40, (2, 1)),  # an inner size the int8 kernel cannot take: dense
    ],
)
def test_linear_matches_the_dequantized_weight(dtype, rows, columns, batch):
    quantized = quantize_int8(_weight(rows, columns))
    x = torch.randn(*batch, columns, generator=torch.Generator().manual_seed(1)).to(dtype)
    expected = x.float() @ quantized.dequantize(torch.float32).T
    out = linear(x, quantized)
    assert out.dtype == dtype and out.shape == (*batch, rows)
    # Activations and outputs pass through bf16 on the kernel path: a few bf16 steps of the largest output.
    assert (out.float() - expected).abs().max() <= 2e-2 * expected.abs().max()


def test_linear_of_a_dense_weight_is_a_plain_matmul():
    weight = _weight(5, 16)
    x = torch.randn(2, 16)
    torch.testing.assert_close(linear(x, weight), x @ weight.T)


@pytest.mark.parametrize("variant", ["text_tied", "vl_untied_sharded"])
def test_load_quantizes_every_projection_and_the_head_and_keeps_the_rest(checkpoint_dirs, engines, variant):
    quantized = Engine.load(checkpoint_dirs[variant], device="cpu", dtype=torch.float32, quantize="int8")
    dense = engines[variant].model.weights
    weights = quantized.model.weights
    assert weights.keys() == dense.keys()
    for name, weight in weights.items():
        if is_quantized(name):
            assert isinstance(weight, Int8Weight), name
            step = weight.scales.float()[:, None]
            assert ((weight.dequantize(torch.float32) - dense[name]).abs() <= step / 2 + 1e-6).all(), name
        else:
            assert torch.equal(weight, dense[name]), name
    # The head, and per layer the MLP's two matrices and the mixer's input and output projections.
    assert sum(map(is_quantized, weights)) == 1 + 4 * quantized.config.num_hidden_layers


def test_int8_logits_stay_about_as_close_to_fp32_as_bf16_ones(checkpoint_dirs, engines):
    """The tiny random model amplifies any rounding (bf16 alone moves its logits by about 8%): int8 weights
    with bf16 activations may move them at most twice as far as bf16 weights do."""
    path = checkpoint_dirs["text_tied"]
    variants = {
        "bf16": Engine.load(path, device="cpu", dtype=torch.bfloat16),
        "int8": Engine.load(path, device="cpu", dtype=torch.float32, quantize="int8"),
    }
    prompt = list(range(100, 140))

    def next_logits(engine: Engine) -> torch.Tensor:
        session = engine.new_session(max_tokens=64)
        session.append(prompt)
        return session.last_logits[0]

    reference = next_logits(engines["text_tied"])
    error = {
        name: ((next_logits(engine) - reference).abs().max() / reference.abs().max()).item()
        for name, engine in variants.items()
    }
    assert 0 < error["int8"] <= 2 * error["bf16"]


def test_quantization_runs_on_the_cpu_only(checkpoint_dirs):
    with pytest.raises(ValueError, match="CPU only"):
        Engine.load(checkpoint_dirs["text_tied"], device="meta", quantize="int8")


def test_an_unknown_quantization_is_refused(checkpoint_dirs):
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        Engine.load(checkpoint_dirs["text_tied"], device="cpu", quantize="int4")


def _load_int8(directory, cache_dir) -> Engine:
    return Engine.load(directory, device="cpu", dtype=torch.float32, quantize="int8", cache_dir=cache_dir)


@pytest.mark.parametrize("variant", ["text_tied", "vl_untied_sharded"])
def test_int8_weights_are_kept_and_read_back_instead_of_quantized_again(
    checkpoint_dirs, tmp_path, monkeypatch, variant
):
    first = _load_int8(checkpoint_dirs[variant], tmp_path).model.weights
    assert len(list((tmp_path / INT8_CACHE).glob("*.safetensors"))) == 1

    def no_quantizing(weight):
        raise AssertionError("quantized again despite the cache")

    monkeypatch.setattr("model.loader.quantize_int8", no_quantizing)
    second = _load_int8(checkpoint_dirs[variant], tmp_path).model.weights
    assert second.keys() == first.keys()
    for name, weight in second.items():
        if isinstance(weight, Int8Weight):
            assert torch.equal(weight.values, first[name].values) and torch.equal(
                weight.scales, first[name].scales
            )
        else:
            assert torch.equal(weight, first[name]), name


def test_a_changed_checkpoint_gets_new_int8_weights(checkpoint_dirs, tmp_path):
    directory = tmp_path / "model"
    shutil.copytree(checkpoint_dirs["text_tied"], directory)
    _load_int8(directory, tmp_path / "cache")
    weights = directory / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
    _load_int8(directory, tmp_path / "cache")
    assert len(list((tmp_path / "cache" / INT8_CACHE).glob("*.safetensors"))) == 2


def test_an_unreadable_cache_file_is_quantized_again_and_replaced(checkpoint_dirs, tmp_path, caplog):
    dense = _load_int8(checkpoint_dirs["text_tied"], tmp_path).model.weights
    (kept,) = (tmp_path / INT8_CACHE).glob("*.safetensors")
    kept.write_bytes(b"not a safetensors file")
    weights = _load_int8(checkpoint_dirs["text_tied"], tmp_path).model.weights
    assert "ignoring the unreadable int8 weights cache" in caplog.text
    assert torch.equal(weights["lm_head.weight"].values, dense["lm_head.weight"].values)
    assert kept.stat().st_size > 1000

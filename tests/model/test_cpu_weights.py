"""CPU weights: the bf16-stored default against fp32 weights, int8, int4 and int6 quantization, their products on every
path against the dequantized weights, load-time conversion of both checkpoint layouts, and the quantized cache."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from kernels.reference import weight_products as layout
from model import cpu_weights
from model.cpu_weights import (
    AMX_KIND,
    AMX_PRODUCT_MAX_ROWS,
    PRODUCT_MAX_ROWS,
    QUANTIZED_KINDS,
    CpuWeight,
    cpu_linear,
    matrix_kind,
    more_bits,
    stored_kind,
    to_cpu_weight,
)
from model.engine import QUANTIZED_CACHE, Engine
from model.engine_options import EngineOptions
from model.linear import linear
from model.loader import is_matrix
from model.quantize import quantize_affine, quantize_int8
from model.qwen35 import Qwen35Model
from model.sampling_params import SamplingParams


def _weight(rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator) * 0.02
    weight[rows // 2] *= 40  # one row of much larger values: its scale must not leak into the others
    return weight


def test_int8_maps_each_blocks_largest_magnitude_to_127_and_rounds_to_the_nearest_step():
    weight = _weight(37, 80)
    values, scales = quantize_int8(weight)
    assert values.dtype == torch.int8 and scales.dtype == torch.float16
    assert values.shape == (37, 96) and scales.shape == (37, 3) and not values[:, 80:].any()
    blocks = values[:, :64].view(37, 2, 32)
    assert (blocks.abs().amax(dim=-1) >= 126).all() and (values[:, 64:80].abs().amax(dim=-1) >= 126).all()
    step = scales.float().repeat_interleave(32, dim=1)[:, :80]
    assert ((values[:, :80].float() * step - weight).abs() <= step / 2 + 1e-7).all()


def _affine_blocks(values, scales, minimums, steps) -> torch.Tensor:
    """quantize_affine's output back to weights [N, chunks, blocks of a chunk, BLOCK]."""
    rows, chunks = steps.shape[:2]
    scale = scales.float().view(rows, chunks, -1) * steps[..., :1]
    minimum = minimums.float().view(rows, chunks, -1) * steps[..., 1:2] + steps[..., 2:]
    return values.float().view(rows, chunks, -1, layout.BLOCK) * scale[..., None] + minimum[..., None]


@pytest.mark.parametrize("bits", [4, 6])
def test_affine_fits_each_block_at_least_as_well_as_its_range_on_the_chunks_grids(bits):
    weight = _weight(37, 2 * layout.CHUNK)
    values, scales, minimums, steps = quantize_affine(weight, bits)
    levels = 2**bits - 1
    assert values.dtype == torch.uint8 and int(values.max()) == levels
    assert (scales.dtype, minimums.dtype, steps.dtype) == (torch.uint8, torch.int8, torch.float32)
    # Each chunk uses its whole scale grid: its largest block scale is about 255 steps (a refit may lower it).
    assert (scales.view(37, 2, -1).amax(-1) >= 240).all()
    groups = weight.view(37, 2, -1, layout.BLOCK)
    error = (_affine_blocks(values, scales, minimums, steps) - groups).square().sum(-1)
    low, high = groups.amin(-1), groups.amax(-1)
    step = (high - low) / levels
    plain = ((groups - low[..., None]) / step[..., None]).round().clamp(0, levels) * step[..., None] + low[
        ..., None
    ]
    # The fit's search gains more than the grids cost in all (which may cost a 6-bit block up to a third).
    plain_error = (plain - groups).square().sum(-1)
    assert error.sum() <= plain_error.sum() * 0.95
    assert (error <= plain_error * 1.5 + 1e-12).all()


def test_affine_keeps_constant_and_zero_blocks_to_the_rounding_of_fp32():
    weight = torch.zeros(4, 2 * layout.BLOCK)
    weight[1, : layout.BLOCK] = 0.25
    weight[2, layout.BLOCK :] = -0.5
    for kind in ("int4", "int6"):
        q = to_cpu_weight(weight, kind)
        assert (q.dequantize()[:4, : 2 * layout.BLOCK] - weight).abs().max() <= 1e-7, kind


def test_affine_pads_a_partial_chunk_with_zeros():
    weight = _weight(5, 40)
    values, scales, minimums, steps = quantize_affine(weight, 4)
    assert values.shape == (5, 512) and scales.shape == minimums.shape == (5, 16) and steps.shape == (5, 1, 3)
    back = _affine_blocks(values, scales, minimums, steps).view(5, 512)
    assert not back[:, 64:].any()
    assert (back[:, :40] - weight).abs().max() <= (scales.float() * steps[..., 0]).max() / 2 + 1e-6


def test_affine_quantization_takes_4_or_6_bits():
    with pytest.raises(ValueError, match="bits"):
        quantize_affine(torch.zeros(2, 32), 5)


def test_int4_keeps_the_head_and_the_sensitive_matrices_of_some_layers_at_6_bits():
    weight = torch.zeros(2, 2)
    picked = [i for i in range(24) if more_bits(i, 24)]
    # As llama.cpp's Q4_K_M picks them for 24 layers: the first and last eighth and every third between.
    assert picked == [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]
    assert matrix_kind("lm_head.weight", weight, "int4", 24) == "int6"
    assert matrix_kind("layers.5.mlp.down_proj.weight", weight, "int4", 24) == "int6"
    assert matrix_kind("layers.5.linear_attn.in_proj.weight", weight, "int4", 24) == "int6"
    assert matrix_kind("layers.6.mlp.down_proj.weight", weight, "int4", 24) == "int4"
    assert matrix_kind("layers.5.mlp.gate_up_proj.weight", weight, "int4", 24) == "int4"
    assert matrix_kind("mtp.layers.0.mlp.down_proj.weight", weight, "int4", 24) == "int4"
    assert matrix_kind("lm_head.weight", weight, "int8", 24) == "int8"
    assert matrix_kind("lm_head.weight", weight.bfloat16(), None, 24) == "bfloat16"


# AMX tiles meet fp32 activations densely, on any CPU.
@pytest.mark.parametrize("kind", ["float32", "bfloat16", AMX_KIND, *QUANTIZED_KINDS])
@pytest.mark.parametrize(
    ("rows", "columns", "batch"),
    [
        (37, 64, (1, 1)),  # one decode token: the C++ product
        (37, 64, (3, 1)),  # a batched decode step
        (1029, 128, (1, PRODUCT_MAX_ROWS + 5)),  # a prefill: dense blocks, the last one partial
        (37, 40, (2, 1)),  # an inner size the tiles and blocks pad
    ],
)
@pytest.mark.parametrize("compiled", [True, False])
def test_linear_matches_the_dequantized_weight(monkeypatch, kind, rows, columns, batch, compiled):
    if not compiled:
        monkeypatch.setattr(cpu_weights.cpu_kernels, "ops", lambda: None)
    weight = to_cpu_weight(_weight(rows, columns), kind)
    x = torch.randn(*batch, columns, generator=torch.Generator().manual_seed(1))
    if kind in QUANTIZED_KINDS and compiled and x[..., 0].numel() <= PRODUCT_MAX_ROWS:
        # The C++ integer products quantize the activations per block of 32; a dense product keeps them in fp32.
        flat = layout.integer_product(x.reshape(-1, columns), weight.dequantize())
        expected = flat[:, :rows].reshape(*batch, rows)
    else:
        expected = x.double() @ weight.dequantize()[:rows, :columns].double().T
    out = linear(x, weight)
    assert out.dtype == torch.float32 and out.shape == (*batch, rows)
    assert (out - expected).abs().max() <= 1e-5 * expected.abs().max()


@pytest.mark.parametrize("rows_of_x", [1, 5, 100, AMX_PRODUCT_MAX_ROWS + 16])
def test_amx_tiles_meet_bf16_activations_in_tile_products_or_densely(rows_of_x):
    if not cpu_weights.cpu_kernels.amx_products():
        pytest.skip("this CPU has no AMX tiles")
    weight = to_cpu_weight(_weight(1029, 136), AMX_KIND)
    x = torch.randn(rows_of_x, 136, generator=torch.Generator().manual_seed(2)).bfloat16()
    out = cpu_linear(x, weight)
    want = x.double() @ weight.dequantize()[:1029, :136].double().T
    assert out.dtype == torch.bfloat16 and out.shape == (rows_of_x, 1029)
    # Sums rounded to bf16 at the end.
    assert (
        (out.double() - want).abs() <= 2**-8 * want.abs() + 1e-5 * (x.double().abs().sum(-1, keepdim=True))
    ).all()


def test_bf16_matrices_go_to_amx_tiles_only_for_bf16_activations_on_a_cpu_with_them(monkeypatch):
    weight = _weight(9, 32).bfloat16()
    for available in (True, False):
        monkeypatch.setattr(cpu_weights.cpu_kernels, "amx_products", lambda available=available: available)
        assert stored_kind(weight, None, torch.bfloat16) == (AMX_KIND if available else "bfloat16")
        assert stored_kind(weight, None, torch.float32) == "bfloat16"
        assert stored_kind(weight.float(), None, torch.bfloat16) == "float32"
        assert stored_kind(weight, "int8", torch.bfloat16) == "int8"
        assert matrix_kind("lm_head.weight", weight, None, 24, torch.bfloat16) == stored_kind(
            weight, None, torch.bfloat16
        )


def test_an_embedding_tied_to_a_head_in_amx_tiles_reads_its_rows():
    matrix = _weight(40, 72).bfloat16()
    head = to_cpu_weight(matrix, AMX_KIND)
    tokens = torch.tensor([[39, 0, 17], [16, 15, 3]])
    assert torch.equal(head.embedding(tokens, torch.float32), matrix[tokens].float())


def test_bf16_activations_come_back_in_bf16():
    weight = to_cpu_weight(_weight(9, 32), "bfloat16")
    x = torch.randn(2, 32).bfloat16()
    out = cpu_linear(x, weight)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), x.float() @ weight.dequantize()[:9].T, rtol=1e-2, atol=1e-2)


def test_linear_of_a_plain_weight_is_a_plain_matmul():
    weight = _weight(5, 16)
    x = torch.randn(2, 16)
    torch.testing.assert_close(linear(x, weight), x @ weight.T)


@pytest.fixture(scope="module")
def bf16_checkpoint(checkpoint_dirs, tmp_path_factory):
    """The text_tied checkpoint stored in bf16, as the published model is."""
    directory = tmp_path_factory.mktemp("bf16") / "model"
    shutil.copytree(checkpoint_dirs["text_tied"], directory)
    weights = directory / "model.safetensors"
    save_file(
        {name: t.bfloat16() for name, t in load_file(weights).items()}, weights, metadata={"format": "pt"}
    )
    return directory


def test_bf16_stored_weights_give_the_outputs_of_fp32_copies(bf16_checkpoint):
    """The default on a CPU without native bf16: bf16 weights widened in the products, fp32 everywhere else,
    against the same model holding fp32 copies of those weights (the default before weights stayed bf16)."""
    engine = Engine.load(bf16_checkpoint, EngineOptions(device="cpu", dtype="float32", max_context=256))
    stored = engine.model.weights
    kinds = {w.kind for w in stored.values() if isinstance(w, CpuWeight)}
    assert kinds == {"bfloat16"}
    assert stored["embed_tokens.weight"] is stored["lm_head.weight"]
    plain = {
        name: w.dequantize()[: w.shape[0], : w.shape[1]] if isinstance(w, CpuWeight) else w.float()
        for name, w in stored.items()
    }
    fp32 = Engine(Qwen35Model(engine.config, plain), engine.tokenizer, engine.options)
    prompt = list(range(100, 160))
    outputs = {}
    for name, candidate in {"stored": engine, "fp32": fp32}.items():
        session = candidate.new_session(max_tokens=200)
        session.append(prompt)
        logits = session.last_logits[0].clone()
        outputs[name] = (logits, session.generate(60, SamplingParams(temperature=0), stop_ids=set())[0])
    (got, got_tokens), (want, want_tokens) = outputs["stored"], outputs["fp32"]
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    assert got_tokens == want_tokens


def test_bf16_stored_weights_hold_half_the_bytes(bf16_checkpoint):
    engine = Engine.load(bf16_checkpoint, EngineOptions(device="cpu", dtype="float32", max_context=64))
    matrices = [w for name, w in engine.model.weights.items() if is_matrix(name)]
    assert all(w.tiles.dtype == torch.bfloat16 for w in matrices)


@pytest.mark.parametrize("quantize", ["int8", "int4"])
@pytest.mark.parametrize("variant", ["text_tied", "vl_untied_sharded"])
def test_load_quantizes_every_projection_and_the_head_and_keeps_the_rest(
    checkpoint_dirs, engines, variant, quantize
):
    quantized = Engine.load(
        checkpoint_dirs[variant], EngineOptions(device="cpu", dtype="float32", quantize=quantize)
    )
    dense = engines[variant].model.weights
    weights = quantized.model.weights
    assert weights.keys() == dense.keys()
    layers = quantized.config.num_hidden_layers
    for name, weight in weights.items():
        if is_matrix(name):
            assert isinstance(weight, CpuWeight), name
            assert weight.kind == matrix_kind(name, dense[name].tiles, quantize, layers), name
            rows, columns = weight.shape
            original = dense[name].dequantize()[:rows, :columns]
            error = (weight.dequantize()[:rows, :columns] - original).abs().max()
            assert error <= original.abs().max() / {"int4": 7, "int6": 31, "int8": 127}[weight.kind], name
        elif isinstance(weight, torch.Tensor):
            assert torch.equal(
                weight,
                dense[name].dequantize()[: weight.shape[0], : weight.shape[1]]
                if isinstance(dense[name], CpuWeight)
                else dense[name],
            ), name
    if quantize == "int4":
        assert weights["lm_head.weight"].kind == "int6"
        assert weights[f"layers.{layers - 1}.mlp.down_proj.weight"].kind == "int6"
    # The head, and per layer the MLP's two matrices and the mixer's input and output projections.
    assert sum(map(is_matrix, weights)) == 1 + 4 * quantized.config.num_hidden_layers


# Slow (left out of the fast tier): quantizes a head of the real vocabulary.
@pytest.mark.slow
def test_quantized_logits_stay_close_to_the_fp32_ones(checkpoint_dirs, engines):
    """The tiny random model amplifies any rounding (bf16 alone moves its logits by about 8%): int8 weights
    stay within that; int4 moves them further but keeps them correlated."""
    path = checkpoint_dirs["text_tied"]
    prompt = list(range(100, 140))

    def next_logits(engine: Engine) -> torch.Tensor:
        session = engine.new_session(max_tokens=64)
        session.append(prompt)
        return session.last_logits[0]

    reference = next_logits(engines["text_tied"])
    bf16 = next_logits(Engine.load(path, EngineOptions(device="cpu", dtype="bfloat16")))
    int8 = next_logits(Engine.load(path, EngineOptions(device="cpu", dtype="float32", quantize="int8")))
    error = {
        name: ((logits - reference).abs().max() / reference.abs().max()).item()
        for name, logits in {"bf16": bf16, "int8": int8}.items()
    }
    assert 0 < error["int8"] <= 2 * error["bf16"]


def test_quantization_runs_on_the_cpu_only():
    with pytest.raises(ValueError, match="quantize runs a model on the CPU only"):
        EngineOptions(device="cuda", quantize="int8")
    with pytest.raises(ValueError, match="quantize runs a model on the CPU only"):
        EngineOptions(quantize="int8").check_device("cuda")  # the default device, once it is known


def test_an_unknown_quantization_is_refused():
    with pytest.raises(ValueError, match="quantize must be one of int8, int4, not 'int3'"):
        EngineOptions(device="cpu", quantize="int3")


def _load(directory, cache_dir, quantize: str) -> Engine:
    return Engine.load(
        directory, EngineOptions(device="cpu", dtype="float32", quantize=quantize, cache_dir=cache_dir)
    )


def _same(a: CpuWeight, b: CpuWeight) -> bool:
    parts = ("tiles", "scales")
    return (a.kind, a.shape) == (b.kind, b.shape) and all(
        (getattr(a, p) is None and getattr(b, p) is None) or torch.equal(getattr(a, p), getattr(b, p))
        for p in parts
    )


# Slow (left out of the fast tier): quantizes a head of the real vocabulary.
@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["int8", "int4"])
@pytest.mark.parametrize("variant", ["text_tied", "vl_untied_sharded"])
def test_quantized_weights_are_kept_and_read_back_instead_of_quantized_again(
    checkpoint_dirs, tmp_path, monkeypatch, variant, quantize
):
    first = _load(checkpoint_dirs[variant], tmp_path, quantize).model.weights
    assert len(list((tmp_path / QUANTIZED_CACHE).glob(f"*-{quantize}-*.safetensors"))) == 1

    def no_quantizing(*args, **kwargs):
        raise AssertionError("quantized again despite the cache")

    monkeypatch.setattr("model.cpu_weights.quantize_int8", no_quantizing)
    monkeypatch.setattr("model.cpu_weights.quantize_affine", no_quantizing)
    second = _load(checkpoint_dirs[variant], tmp_path, quantize).model.weights
    assert second.keys() == first.keys()
    for name, weight in second.items():
        if is_matrix(name):
            assert _same(weight, first[name]), name
        elif isinstance(weight, torch.Tensor):
            assert torch.equal(weight, first[name]), name


def test_int8_and_int4_weights_are_kept_apart(checkpoint_dirs, tmp_path):
    _load(checkpoint_dirs["text_mqa"], tmp_path, "int8")
    _load(checkpoint_dirs["text_mqa"], tmp_path, "int4")
    assert len(list((tmp_path / QUANTIZED_CACHE).glob("*.safetensors"))) == 2


def test_a_changed_checkpoint_gets_new_quantized_weights(checkpoint_dirs, tmp_path):
    directory = tmp_path / "model"
    shutil.copytree(checkpoint_dirs["text_mqa"], directory)
    _load(directory, tmp_path / "cache", "int4")
    weights = directory / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
    _load(directory, tmp_path / "cache", "int4")
    assert len(list((tmp_path / "cache" / QUANTIZED_CACHE).glob("*.safetensors"))) == 2


def test_an_unreadable_cache_file_is_quantized_again_and_replaced(checkpoint_dirs, tmp_path, caplog):
    dense = _load(checkpoint_dirs["text_mqa"], tmp_path, "int8").model.weights
    (kept,) = (tmp_path / QUANTIZED_CACHE).glob("*.safetensors")
    kept.write_bytes(b"not a safetensors file")
    weights = _load(checkpoint_dirs["text_mqa"], tmp_path, "int8").model.weights
    assert "ignoring the unreadable quantized weights cache" in caplog.text
    assert _same(weights["lm_head.weight"], dense["lm_head.weight"])
    assert kept.stat().st_size > 1000

"""The C++ CPU weight products against their torch reference on fresh random tiles, outputs poisoned with NaN:
every matrix shape of Qwen3.5-2B's decode step, odd sizes, and the rows of a batched step; and the tiled layout
itself."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from kernels import cpu as cpu_kernels
from kernels.reference import weight_products as layout
from tests.kernels.integer_weights import (
    INTEGER_KINDS,
    dequantized,
    random_integer_weights,
    run_integer_product,
)

ROOT = Path(__file__).resolve().parents[2]
# The matrices of a Qwen3.5-2B layer (fused as the model holds them) and a slice of its LM head, then odd sizes.
REAL_SHAPES = [(12288, 2048), (2048, 6144), (8224, 2048), (5120, 2048), (2048, 2048), (4099, 2048)]
ODD_SHAPES = [(1, 16), (5, 48), (37, 64), (1029, 64), (6, 4096)]
ROWS_OF_X = [1, 2, 3, 5, 8, 16]


@pytest.fixture(scope="module")
def ops():
    built = cpu_kernels.ops()
    # This machine has a compiler: a build that fails is a failure, not a reason to skip.
    assert built is not None, "the C++ weight products did not build"
    return built


def _tiles(kind: str, n: int, k: int, generator: torch.Generator):
    if kind in INTEGER_KINDS:
        return random_integer_weights(kind, n, k, generator)
    return (layout.tile_rows(torch.randn(n, k, generator=generator).to(getattr(torch, kind))),)


def _run(ops, kind: str, x: torch.Tensor, parts, n: int) -> torch.Tensor:
    out = torch.full((x.shape[0], n), float("nan"))
    if kind in INTEGER_KINDS:
        x = torch.nn.functional.pad(x, (0, dequantized(kind, parts).shape[1] - x.shape[1]))
        run_integer_product(ops, kind, x, parts, out)
    else:
        ops.float_linear.out(x, *parts, out)
    return out


def _dense(kind: str, parts) -> torch.Tensor:
    if kind in INTEGER_KINDS:
        return dequantized(kind, parts)
    return layout.dequantize_float(*parts)


CASES = [
    (kind, n, k) for kind in ("float32", "bfloat16", *INTEGER_KINDS) for n, k in REAL_SHAPES + ODD_SHAPES
]


@pytest.mark.parametrize(("kind", "n", "k"), CASES)
def test_products_match_the_reference(ops, kind, n, k):
    generator = torch.Generator().manual_seed(n * 7919 + k)
    parts = _tiles(kind, n, k, generator)
    dense = _dense(kind, parts)[:n, :k]
    for rows in ROWS_OF_X if n * k <= 2048 * 2048 else (1, 3, 8):
        x = torch.randn(rows, k, generator=generator)
        got = _run(ops, kind, x, parts, n)
        if kind in INTEGER_KINDS:
            # x quantized per block of 32, as the product quantizes it; the rest is exact but for fp32 sums.
            want = layout.integer_product(x, dequantized(kind, parts)).float()
            values, x_scales = layout.quantize_activations(torch.nn.functional.pad(x, (0, -k % layout.CHUNK)))
            x = (values.view(rows, -1, layout.BLOCK) * x_scales[..., None]).view(rows, -1)[:, :k]
        else:
            want = (x.double() @ dense.double().T).float()
        assert not got.isnan().any(), f"{rows} rows: outputs left unwritten"
        # fp32 sums in another order: a few ulp of the sum of the products' magnitudes.
        bound = 1e-5 * (x.abs() @ dense.abs().T) + 1e-6
        assert ((got - want).abs() <= bound).all(), f"{rows} rows"


@pytest.mark.parametrize(("n", "k"), REAL_SHAPES[:2] + ODD_SHAPES)
def test_bf16_dot_products_match_the_widened_product(ops, n, k):
    generator = torch.Generator().manual_seed(n + k)
    (tiles,) = _tiles("bfloat16", n, k, generator)
    dense = _dense("bfloat16", (tiles,))[:n, :k]
    for rows in ROWS_OF_X:
        x = torch.randn(rows, k, generator=generator).bfloat16()
        out = torch.full((rows, n), float("nan"))
        ops.bf16_dot_linear.out(x, tiles, out)
        want = (x.double() @ dense.double().T).float()
        assert not out.isnan().any(), f"{rows} rows: outputs left unwritten"
        assert ((out - want).abs() <= 1e-5 * (x.float().abs() @ dense.abs().T) + 1e-6).all(), f"{rows} rows"


def _dense_rows(ops, kind: str, parts, first: int, out: torch.Tensor) -> None:
    if kind == "int8":
        ops.int8_rows.out(parts[0], parts[1], first, out)
    elif kind in INTEGER_KINDS:
        ops.affine_rows.out(parts[0], parts[1], first, out)
    else:
        ops.untile_rows.out(parts[0], first, out)


@pytest.mark.parametrize(("kind", "n", "k"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dense_rows_match_the_reference(ops, kind, n, k, dtype):
    generator = torch.Generator().manual_seed(n * 31 + k)
    parts = _tiles(kind, n, k, generator)
    want = _dense(kind, parts)[:n]
    # A block from a random row to the end, as the dense products take them, and the whole matrix.
    first = int(torch.randint(0, n, (1,), generator=generator))
    for begin in (first, 0):
        out = torch.full((n - begin, want.shape[1]), float("nan"), dtype=dtype)
        _dense_rows(ops, kind, parts, begin, out)
        # scale * value + minimum may be one fused multiply-add: within an fp32 rounding of the reference, then
        # rounded to bf16 from that (so within one bf16 rounding).
        rtol = 2e-7 if dtype == torch.float32 else 2**-8
        torch.testing.assert_close(out.float(), want[begin:], rtol=rtol, atol=1e-7)
        if kind in ("float32", "bfloat16", "int8"):
            assert torch.equal(out, want[begin:].to(dtype)), f"rows from {begin}"
    functional = {
        "int8": lambda: ops.int8_rows(parts[0], parts[1], 1, n - 1, dtype),
        "float32": lambda: ops.untile_rows(parts[0], 1, n - 1, dtype),
        "bfloat16": lambda: ops.untile_rows(parts[0], 1, n - 1, dtype),
    }.get(kind, lambda: ops.affine_rows(parts[0], parts[1], 1, n - 1, parts[2], dtype))
    assert torch.equal(functional(), out[1:])


def _affine(bits=4, row_bytes=320, dtype=torch.uint8):
    """Arguments of a 5 x 512 4-bit affine_linear (rows of a 64-byte header and 256 bytes) with one changed."""
    return torch.randn(1, 512), torch.zeros(5, row_bytes, dtype=dtype), bits


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ops, w: ops.float_linear.out(torch.randn(1, 48), w, torch.empty(1, 5)), "tiles of a"),
        (lambda ops, w: ops.float_linear.out(torch.randn(1, 32).double(), w, torch.empty(1, 5)), "float32"),
        (lambda ops, w: ops.float_linear.out(torch.randn(1, 32), w, torch.empty(1, 9)), "tiles"),
        (
            lambda ops, w: ops.int8_linear.out(torch.randn(1, 512), w, torch.empty(8), torch.empty(1, 5)),
            "int8 rows",
        ),
        (
            lambda ops, w: ops.int8_linear.out(torch.randn(1, 32), w, torch.empty(8), torch.empty(1, 5)),
            "multiples of 512",
        ),
        (lambda ops, w: ops.affine_linear.out(*_affine(bits=5), torch.empty(1, 5)), "4- or 6-bit"),
        (lambda ops, w: ops.affine_linear.out(*_affine(bits=6), torch.empty(1, 5)), "affine rows"),
        (lambda ops, w: ops.affine_linear.out(*_affine(row_bytes=256), torch.empty(1, 5)), "affine rows"),
        (lambda ops, w: ops.affine_linear.out(*_affine(dtype=torch.int8), torch.empty(1, 5)), "affine rows"),
        (lambda ops, w: ops.untile_rows.out(w, 5, torch.empty(4, 32)), "not all within"),
        (lambda ops, w: ops.untile_rows.out(w, 0, torch.empty(4, 32).half()), "float32 or bfloat16"),
        (lambda ops, w: ops.untile_rows.out(w, 0, torch.empty(4, 48)), r"tiles must be \[N, 48\]"),
        (
            lambda ops, w: ops.int8_rows.out(
                torch.zeros(2, 512, dtype=torch.int8), torch.zeros(3).half(), 0, torch.empty(2, 512)
            ),
            "int8 scales",
        ),
        (lambda ops, w: ops.affine_rows.out(_affine()[1], 4, 3, torch.empty(3, 512)), "not all within"),
        (
            lambda ops, w: ops.affine_rows.out(_affine()[1], 4, 0, torch.empty(3, 1024)),
            "affine rows of K = 1024",
        ),
    ],
)
def test_bad_inputs_are_refused_with_a_message(ops, call, message):
    weight = _tiles("bfloat16", 5, 32, torch.Generator().manual_seed(4))[0]
    with pytest.raises(RuntimeError, match=message):
        call(ops, weight)


def test_tiles_round_trip_and_pad_with_zeros():
    matrix = torch.randn(7, 40)
    tiles = layout.tile_rows(matrix)
    assert tiles.shape == (8, 48)
    back = layout.untile_rows(tiles)
    assert torch.equal(back[:7, :40], matrix) and not back[7:].any() and not back[:, 40:].any()
    assert torch.equal(layout.untile_rows(tiles, slice(4, 8)), back[4:8])
    indices = torch.tensor([[6, 0], [3, 5]])
    assert torch.equal(layout.rows_of_tiles(tiles, indices)[..., :40], matrix[indices])


def test_a_tile_is_one_stream_of_its_rows_interleaved():
    matrix = torch.arange(4 * 32).view(4, 32)
    tiles = layout.tile_rows(matrix).reshape(-1)
    # Row 0's first 16 values, then row 1's, row 2's and row 3's, then row 0's next 16.
    assert torch.equal(tiles[:16], matrix[0, :16]) and torch.equal(tiles[16:32], matrix[1, :16])
    assert torch.equal(tiles[64:80], matrix[0, 16:])


def test_blocks_put_each_activation_block_in_one_lane_and_round_trip():
    values = torch.randint(-127, 128, (3, 600), dtype=torch.int8)
    blocked = layout.block_values(values)
    assert blocked.shape == (3, 1024)
    back = layout.unblock_values(blocked)
    assert torch.equal(back[:, :600], values) and not back[:, 600:].any()
    assert torch.equal(layout.unblock_values(blocked, slice(1, 3)), back[1:3])
    # Vector j (64 bytes) of a chunk holds values 4j .. 4j + 3 of each of the chunk's 16 blocks of 32, block i in
    # its lane i: vector 1's lane 2 holds values 68 .. 71.
    assert torch.equal(blocked[0, 64 + 8 : 64 + 12], values[0, 68:72])
    assert torch.equal(blocked[0, 512 : 512 + 4], values[0, 512:516])


def test_activations_are_quantized_per_block_to_their_largest_magnitude():
    x = torch.zeros(2, 64)
    x[0, :32] = torch.linspace(-2.0, 1.0, 32)
    x[1, 32:] = 0.5
    values, scales = layout.quantize_activations(x)
    assert torch.allclose(scales, torch.tensor([[2 / 127, 0.0], [0.0, 0.5 / 127]]))
    assert (
        values[0, 0] == -127
        and values[1, 40] == 127
        and not values[0, 32:].any()
        and not values[1, :32].any()
    )
    assert (values[0, :32] * scales[0, 0] - x[0, :32]).abs().max() <= scales[0, 0] / 2 + 1e-7


def test_int4_packs_a_chunks_vectors_in_pairs_of_nibbles_and_unpacks_them():
    values = torch.randint(0, 16, (3, 1024), dtype=torch.uint8)
    packed = layout.pack_affine(values, 4)
    assert packed.shape == (3, 512)
    # Packed vector 1 of chunk 1 holds the chunk's vectors 2 and 3 (64 bytes each) in its low and high nibbles.
    assert torch.equal(
        packed[0, 256 + 64 : 256 + 128],
        values[0, 512 + 128 : 512 + 192] | (values[0, 512 + 192 : 512 + 256] << 4),
    )
    assert torch.equal(layout.unpack_affine(packed, 4), values)


def test_int6_puts_a_chunks_upper_bits_after_its_nibbles_and_unpacks_them():
    values = torch.randint(0, 64, (3, 1024), dtype=torch.uint8)
    packed = layout.pack_affine(values, 6)
    assert packed.shape == (3, 768)
    chunk = packed[0, 384:768]  # the second chunk: 256 bytes of nibbles, then 128 of upper bits
    assert torch.equal(
        chunk[64:128],
        (values[0, 512 + 128 : 512 + 192] & 0xF) | ((values[0, 512 + 192 : 512 + 256] & 0xF) << 4),
    )
    # Upper-bit vector 1 holds vectors 4 .. 7 of the chunk, vector 4 + t in bits 2t and 2t + 1.
    upper = values[0, 512 + 256 : 1024].view(4, 64) >> 4
    assert torch.equal(
        chunk[256 + 64 : 256 + 128], upper[0] | (upper[1] << 2) | (upper[2] << 4) | (upper[3] << 6)
    )
    assert torch.equal(layout.unpack_affine(packed, 6), values)


def test_affine_rows_keep_each_groups_scales_minimums_and_steps_before_its_chunks():
    generator = torch.Generator().manual_seed(7)
    chunks, bits = 5, 4  # a full group of four chunks, then a group of one
    packed = torch.randint(0, 256, (3, chunks * 256), dtype=torch.uint8, generator=generator)
    scales = torch.randint(0, 256, (3, chunks * 16), dtype=torch.uint8, generator=generator)
    minimums = torch.randint(-127, 128, (3, chunks * 16), dtype=torch.int8, generator=generator)
    steps = torch.randn(3, chunks, layout.STEPS, generator=generator)
    rows = layout.interleave_affine(packed, scales, minimums, steps, bits)
    # 4 x 44 header bytes padded to 192, four chunks of 256 bytes; then 44 padded to 64, one chunk.
    assert rows.shape == (3, 192 + 1024 + 64 + 256) == (3, layout.affine_row_bytes(chunks * 512, bits))
    row, second = rows[1], 1216
    assert torch.equal(row[:64], scales[1, :64]) and torch.equal(
        row[64:128].view(torch.int8), minimums[1, :64]
    )
    assert torch.equal(row[128:176].view(torch.float32), steps[1, :4].reshape(-1))
    assert torch.equal(row[192:1216], packed[1, :1024])
    assert torch.equal(row[second : second + 16], scales[1, 64:])
    assert torch.equal(row[second + 16 : second + 32].view(torch.int8), minimums[1, 64:])
    assert torch.equal(row[second + 32 : second + 44].view(torch.float32), steps[1, 4])
    assert torch.equal(row[second + 64 :], packed[1, 1024:])
    parts = layout.split_affine(rows, bits, chunks * 512)
    assert all(
        torch.equal(got, want) for got, want in zip(parts, (packed, scales, minimums, steps), strict=True)
    )


def test_without_a_compiler_the_products_fall_back_with_one_notice(monkeypatch, caplog):
    from torch.utils import cpp_extension

    def no_compiler(**_):
        raise RuntimeError("Error building extension: g++: command not found")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    # Built afresh for this test only: monkeypatch puts the engine's loaded library back afterwards (loading it
    # a second time would register its operators twice).
    monkeypatch.setattr(cpu_kernels, "_ops", cpu_kernels._UNBUILT)
    with caplog.at_level(logging.WARNING):
        assert cpu_kernels.ops() is None
        assert cpu_kernels.ops() is None
    notices = [r for r in caplog.records if "plain PyTorch" in r.getMessage()]
    assert len(notices) == 1 and "g++: command not found" in notices[0].getMessage()
    assert f"about {cpu_kernels.FALLBACK_SLOWDOWN} slower" in notices[0].getMessage()
    assert "install" in notices[0].getMessage()

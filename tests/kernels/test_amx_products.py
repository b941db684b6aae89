"""bf16 products on AMX tiles (kernels/cpu/amx_products.cpp) against the exact product on fresh random weights,
outputs poisoned with NaN: Qwen3.5-2B's matrix shapes and odd ones, passes of 1 to 70 rows, a row's product the
same in any pass; and the AMX layout, written out row-major, on any CPU."""

from __future__ import annotations

import pytest
import torch

from kernels import cpu as cpu_kernels
from kernels.reference import weight_products as layout

SHAPES = [(12288, 2048), (2048, 6144), (8224, 2048), (37, 64), (1029, 128), (5, 48), (6, 4096)]
ROWS_OF_X = [1, 2, 3, 5, 8, 16, 17, 33, 64, 70]


@pytest.fixture(scope="module")
def ops():
    built = cpu_kernels.ops()
    assert built is not None, "the C++ kernels did not build"
    return built


@pytest.fixture(scope="module")
def amx(ops):
    if not ops.amx_ready():
        pytest.skip("this CPU has no AMX tiles (or Linux does not let this process use them)")
    return ops


def _matrix(n: int, k: int, seed: int) -> torch.Tensor:
    return (torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02).bfloat16()


def _product(amx, x: torch.Tensor, tiles: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.full((x.shape[0], n), float("nan"))
    amx.amx_bf16_linear.out(torch.nn.functional.pad(x, (0, tiles.shape[1] - x.shape[1])), tiles, out)
    return out


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_products_match_the_exact_product(amx, n, k):
    weight = _matrix(n, k, n + k)
    tiles = layout.amx_tiles(weight)
    generator = torch.Generator().manual_seed(n * k)
    for rows in ROWS_OF_X if n * k <= 2048 * 2048 else (1, 5, 17):
        x = torch.randn(rows, k, generator=generator).bfloat16()
        got = _product(amx, x, tiles, n)
        assert not got.isnan().any(), f"{rows} rows: outputs left unwritten"
        want = x.double() @ weight.double().T
        # Exact bf16 products summed in fp32 in the tiles' order: a few ulp of the sum of their magnitudes.
        bound = 1e-5 * (x.double().abs() @ weight.double().abs().T) + 1e-7
        assert ((got.double() - want).abs() <= bound).all(), f"{rows} rows"


def test_a_rows_product_is_the_same_in_any_pass(amx):
    """A verify pass of several tokens must round as the decode steps it stands for."""
    weight = _matrix(1029, 2048, 3)
    tiles = layout.amx_tiles(weight)
    x = torch.randn(70, 2048, generator=torch.Generator().manual_seed(4)).bfloat16()
    whole = _product(amx, x, tiles, 1029)
    for begin, end in [(0, 1), (5, 6), (69, 70), (0, 5), (3, 20), (10, 43), (0, 64)]:
        assert torch.equal(_product(amx, x[begin:end], tiles, 1029), whole[begin:end]), f"rows {begin}-{end}"


def test_bad_inputs_are_refused_with_a_message(amx):
    tiles = layout.amx_tiles(_matrix(20, 64, 5))
    with pytest.raises(RuntimeError, match="multiples of 32"):
        amx.amx_bf16_linear(torch.zeros(1, 48, dtype=torch.bfloat16), tiles[:, :48].contiguous(), 20)
    with pytest.raises(RuntimeError, match="bfloat16"):
        amx.amx_bf16_linear(torch.zeros(1, 64), tiles, 20)
    with pytest.raises(RuntimeError, match="do not hold the groups"):
        amx.amx_bf16_linear(torch.zeros(1, 64, dtype=torch.bfloat16), tiles, 40)


@pytest.mark.parametrize(("n", "k"), [(37, 64), (1029, 128), (5, 48), (2048, 2048)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_written_out_are_the_matrix(ops, n, k, dtype):
    weight = _matrix(n, k, n * 3 + k)
    tiles = layout.amx_tiles(weight)
    first = int(torch.randint(0, n, (1,), generator=torch.Generator().manual_seed(n)))
    for begin in (first, 0):
        out = torch.full((n - begin, tiles.shape[1]), float("nan"), dtype=dtype)
        ops.amx_untile_rows.out(tiles, begin, out)
        assert torch.equal(out[:, :k], weight[begin:].to(dtype)) and not out[:, k:].any(), (
            f"rows from {begin}"
        )
    assert torch.equal(ops.amx_untile_rows(tiles, 1, n - 1, dtype), out[1:])


def test_amx_tiles_round_trip_and_pad_with_zeros():
    matrix = torch.randn(20, 40).bfloat16()
    tiles = layout.amx_tiles(matrix)
    assert tiles.shape == (32, 64)
    back = layout.untile_amx(tiles)
    assert torch.equal(back[:20, :40], matrix) and not back[20:].any() and not back[:, 40:].any()
    assert torch.equal(layout.untile_amx(tiles, slice(16, 32)), back[16:32])
    indices = torch.tensor([[19, 0], [3, 16]])
    assert torch.equal(layout.rows_of_amx_tiles(tiles, indices)[..., :40], matrix[indices])


def test_a_block_holds_each_pair_of_values_of_its_sixteen_rows_side_by_side():
    matrix = torch.arange(16 * 64).view(16, 64)
    flat = layout.amx_tiles(matrix).reshape(-1)
    # Block 0, pair 0: values 0 and 1 of rows 0, 1, ... 15; pair 1: values 2 and 3 of each row.
    assert torch.equal(flat[:32].view(16, 2), matrix[:, :2])
    assert torch.equal(flat[32:64].view(16, 2), matrix[:, 2:4])
    # Block 1 (values 32 .. 63) follows the 512 values of block 0.
    assert torch.equal(flat[512:544].view(16, 2), matrix[:, 32:34])

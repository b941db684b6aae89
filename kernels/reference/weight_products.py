"""The tiled weight layout the C++ CPU products read (kernels/cpu/weight_products.cpp), in plain PyTorch: tiling,
int4 packing and dequantization, the reference the products are tested against.

A [N, K] matrix is stored as tiles of TILE_ROWS rows (the last one padded with zero rows), each tile's rows
interleaved LANES values at a time, with K padded with zeros to a multiple of LANES (int4: of its group); so one
tile is one sequential stream of memory. int4 values pack 32 to 16 bytes per row: value j of a 32-value block in
the low nibble of byte j, value j + 16 in its high nibble. Per-group int4 scales and minimums are tiled as
[tiles, groups, TILE_ROWS].
"""

from __future__ import annotations

import torch

TILE_ROWS = 4
LANES = 16
INT4_BLOCK = 32


def padded(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def tile_rows(matrix: torch.Tensor) -> torch.Tensor:
    """[N, K] (any dtype) as [N rounded up to TILE_ROWS, K rounded up to LANES] in tile order."""
    rows, columns = matrix.shape
    full = matrix.new_zeros(padded(rows, TILE_ROWS), padded(columns, LANES))
    full[:rows, :columns] = matrix
    tiles, width = full.shape[0] // TILE_ROWS, full.shape[1]
    return full.view(tiles, TILE_ROWS, width // LANES, LANES).transpose(1, 2).reshape(full.shape)


def untile_rows(tiles: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """The padded matrix back in row-major order (rows: a slice of whole tiles, by row)."""
    total, width = tiles.shape
    shaped = tiles.view(total // TILE_ROWS, width // LANES, TILE_ROWS, LANES)
    if rows is not None:
        shaped = shaped[rows.start // TILE_ROWS : -(-rows.stop // TILE_ROWS)]
    return shaped.transpose(1, 2).reshape(-1, width)


def rows_of_tiles(tiles: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows `indices` (any shape) of a tiled matrix, row-major: [*indices.shape, padded K]."""
    total, width = tiles.shape
    shaped = tiles.view(total // TILE_ROWS, width // LANES, TILE_ROWS, LANES)
    flat = indices.reshape(-1)
    picked = shaped[flat // TILE_ROWS, :, flat % TILE_ROWS]  # [len, K / LANES, LANES]
    return picked.reshape(*indices.shape, width)


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Row-major int4 values [N, K] (uint8 in [0, 15], K a multiple of 32) as bytes [N, K / 2]."""
    rows, columns = values.shape
    blocks = values.view(rows, columns // INT4_BLOCK, 2, INT4_BLOCK // 2)
    return (blocks[:, :, 0] | (blocks[:, :, 1] << 4)).reshape(rows, columns // 2)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Bytes [N, K / 2] back to the int4 values [N, K] (uint8)."""
    rows, half = packed.shape
    blocks = packed.view(rows, half // (INT4_BLOCK // 2), 1, INT4_BLOCK // 2)
    return torch.cat((blocks & 0xF, blocks >> 4), dim=2).reshape(rows, half * 2)


def tile_groups(per_group: torch.Tensor) -> torch.Tensor:
    """[N, groups] (scales or minimums) as [tiles, groups, TILE_ROWS] flattened, N padded with zeros."""
    rows, groups = per_group.shape
    full = per_group.new_zeros(padded(rows, TILE_ROWS), groups)
    full[:rows] = per_group
    return full.view(-1, TILE_ROWS, groups).transpose(1, 2).reshape(-1)


def untile_groups(tiled: torch.Tensor, groups: int) -> torch.Tensor:
    """The padded [N, groups] of tile_groups' output."""
    return tiled.view(-1, groups, TILE_ROWS).transpose(1, 2).reshape(-1, groups)


def dequantize_float(tiles: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    return untile_rows(tiles, rows).float()


def dequantize_int8(tiles: torch.Tensor, scales: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    values = untile_rows(tiles, rows).float()
    picked = scales if rows is None else scales[rows.start // TILE_ROWS * TILE_ROWS :][: values.shape[0]]
    return values.mul_(picked.float()[:, None])


def dequantize_int4(
    tiles: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, group: int, rows: slice | None = None
) -> torch.Tensor:
    values = unpack_int4(untile_rows(tiles, rows)).float()
    groups = values.shape[1] // group
    first = 0 if rows is None else rows.start // TILE_ROWS * TILE_ROWS
    scale = untile_groups(scales, groups)[first : first + values.shape[0]].float()
    minimum = untile_groups(minimums, groups)[first : first + values.shape[0]].float()
    grouped = values.view(values.shape[0], groups, group)
    return grouped.mul_(scale[..., None]).add_(minimum[..., None]).view(values.shape)

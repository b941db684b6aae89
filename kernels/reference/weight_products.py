"""The tiled weight layout the C++ CPU products read (kernels/cpu/weight_products.cpp), in plain PyTorch: tiling,
int4 packing and dequantization, the reference the products are tested against.

A [N, K] matrix is stored as tiles of TILE_ROWS rows (the last one padded with zero rows), each tile's rows
interleaved LANES values at a time, with K padded with zeros to a multiple of LANES (int4: of its group); so one
tile is one sequential stream of memory. int4 values pack 32 to 16 bytes per row: value j of a 32-value block in
the low nibble of byte j, value j + 16 in its high nibble. Per-group int4 scales and minimums are tiled as
[tiles, groups, TILE_ROWS].

int8 matrices take integer dot products instead: int8 weights with an fp16 scale per block of INT8_BLOCK values
of a row (llama.cpp's Q8_0) against activations quantized the same way. Rows stay row-major, K padded to a
multiple of INT8_CHUNK and permuted within each chunk so that 32-bit lane i of the chunk's 64-byte vector j holds
values 32i + 4j to 32i + 4j + 3: eight 4-byte dot products per lane sum one whole block, whose two scales are
applied once. The scales stay [N, padded K / INT8_BLOCK] in block order.
"""

from __future__ import annotations

import torch

TILE_ROWS = 4
LANES = 16
INT4_BLOCK = 32
INT8_BLOCK = 32  # activation values sharing one int8 scale
INT8_CHUNK = 512  # values of K in one pass of 16 blocks: 8 vectors of 64 bytes
INT8_MAX = 127


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


def block_int8(values: torch.Tensor) -> torch.Tensor:
    """Row-major int8 values [N, K] as [N, K rounded up to INT8_CHUNK], K permuted within each chunk."""
    rows, columns = values.shape
    full = values.new_zeros(rows, padded(columns, INT8_CHUNK))
    full[:, :columns] = values
    lanes, vectors = INT8_CHUNK // INT8_BLOCK, INT8_BLOCK // 4
    return full.view(rows, -1, lanes, vectors, 4).transpose(2, 3).reshape(rows, -1)


def unblock_int8(blocked: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """The padded row-major values of block_int8's output (rows: a slice of them)."""
    picked = blocked if rows is None else blocked[rows]
    lanes, vectors = INT8_CHUNK // INT8_BLOCK, INT8_BLOCK // 4
    return picked.view(picked.shape[0], -1, vectors, lanes, 4).transpose(2, 3).reshape(picked.shape[0], -1)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [M, K] in [-127, 127] as fp32, scales [M, K / INT8_BLOCK] fp32): each block of x divided by its
    largest magnitude over 127 and rounded half to even, as the int8 product quantizes its input."""
    blocks = x.float().view(x.shape[0], -1, INT8_BLOCK)
    scales = blocks.abs().amax(-1) / INT8_MAX
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    values = (blocks / safe[..., None]).round().clamp(-INT8_MAX, INT8_MAX)
    return values.view(x.shape), scales


def int8_product(x: torch.Tensor, blocked: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """What int8_linear computes, in float64: x [M, K] (zero-padded to the rows' width) quantized per block
    against the int8 rows."""
    x = torch.nn.functional.pad(x.float(), (0, blocked.shape[1] - x.shape[1]))
    values, x_scales = quantize_activations(x)
    dequantized = values.double().view(x.shape[0], -1, INT8_BLOCK) * x_scales.double()[..., None]
    return dequantized.view(x.shape) @ dequantize_int8(blocked, scales).double().T


def dequantize_float(tiles: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    return untile_rows(tiles, rows).float()


def dequantize_int8(blocked: torch.Tensor, scales: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    values = unblock_int8(blocked, rows).float()
    picked = scales if rows is None else scales[rows]
    blocks = values.view(values.shape[0], -1, INT8_BLOCK).mul_(picked.float()[..., None])
    return blocks.view(values.shape)


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

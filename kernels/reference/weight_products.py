"""The weight layouts the C++ CPU products read (kernels/cpu/weight_products.cpp), in plain PyTorch: tiling,
blocking, int4 packing and dequantization, the reference the products are tested against.

Float matrices (fp32, bf16) are stored as tiles of TILE_ROWS rows (the last one padded with zero rows), each
tile's rows interleaved LANES values at a time, with K padded with zeros to a multiple of LANES; so one tile is
one sequential stream of memory.

int8 and int4 matrices take integer dot products instead, against activations quantized to int8 with a scale per
block of BLOCK values (as llama.cpp's Q8_0 quantizes them). Rows stay row-major, K padded with zeros to a
multiple of CHUNK and permuted within each chunk so that 32-bit lane i of the chunk's 64-byte vector j holds
values 32i + 4j to 32i + 4j + 3: eight 4-byte dot products per lane sum one whole block, whose scales are applied
once. int8 weights have an fp16 scale per block (Q8_0); int4 weights (values 0-15) an fp16 scale and minimum per
block (Q4_1), and pack a chunk's eight vectors into four: vector 2v in the low nibbles of packed vector v, vector
2v + 1 in its high nibbles. Scales and minimums stay [N, padded K / BLOCK] in block order.
"""

from __future__ import annotations

import torch

TILE_ROWS = 4
LANES = 16
BLOCK = 32  # values sharing one scale, in weights and activations alike
CHUNK = 512  # values of K in one pass of 16 blocks: 8 vectors of 64 bytes
VECTOR = 64  # bytes per dot-product vector
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


def block_values(values: torch.Tensor) -> torch.Tensor:
    """Row-major values [N, K] (int8, or uint8 int4 values) as [N, K rounded up to CHUNK], K permuted within each
    chunk."""
    rows, columns = values.shape
    full = values.new_zeros(rows, padded(columns, CHUNK))
    full[:, :columns] = values
    lanes, vectors = CHUNK // BLOCK, BLOCK // 4
    return full.view(rows, -1, lanes, vectors, 4).transpose(2, 3).reshape(rows, -1)


def unblock_values(blocked: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """The padded row-major values of block_values' output (rows: a slice of them)."""
    picked = blocked if rows is None else blocked[rows]
    lanes, vectors = CHUNK // BLOCK, BLOCK // 4
    return picked.view(picked.shape[0], -1, vectors, lanes, 4).transpose(2, 3).reshape(picked.shape[0], -1)


def pack_int4(blocked: torch.Tensor) -> torch.Tensor:
    """block_values' output of int4 values (uint8 in [0, 15]) [N, K] as bytes [N, K / 2]: each chunk's vectors
    2v and 2v + 1 in the low and high nibbles of its packed vector v."""
    pairs = blocked.view(blocked.shape[0], -1, 2, VECTOR)
    return (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(blocked.shape[0], -1)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """pack_int4's bytes [N, K / 2] back to the blocked values [N, K] (uint8)."""
    vectors = packed.view(packed.shape[0], -1, 1, VECTOR)
    return torch.cat((vectors & 0xF, vectors >> 4), dim=2).reshape(packed.shape[0], -1)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [M, K] in [-127, 127] as fp32, scales [M, K / BLOCK] fp32): each block of x divided by its
    largest magnitude over 127 and rounded half to even, as the integer products quantize their input."""
    blocks = x.float().view(x.shape[0], -1, BLOCK)
    scales = blocks.abs().amax(-1) / INT8_MAX
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    values = (blocks / safe[..., None]).round().clamp(-INT8_MAX, INT8_MAX)
    return values.view(x.shape), scales


def integer_product(x: torch.Tensor, dequantized: torch.Tensor) -> torch.Tensor:
    """What int8_linear and int4_linear compute, in float64: x [M, K] (zero-padded to the weights' width)
    quantized per block, against the weights' dequantized [N, padded K]."""
    x = torch.nn.functional.pad(x.float(), (0, dequantized.shape[1] - x.shape[1]))
    values, x_scales = quantize_activations(x)
    blocks = values.double().view(x.shape[0], -1, BLOCK) * x_scales.double()[..., None]
    return blocks.view(x.shape) @ dequantized.double().T


def dequantize_float(tiles: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    return untile_rows(tiles, rows).float()


def dequantize_int8(blocked: torch.Tensor, scales: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    values = unblock_values(blocked, rows).float()
    picked = scales if rows is None else scales[rows]
    return values.view(values.shape[0], -1, BLOCK).mul_(picked.float()[..., None]).view(values.shape)


def dequantize_int4(
    packed: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, rows: slice | None = None
) -> torch.Tensor:
    picked = packed if rows is None else packed[rows]
    values = unblock_values(unpack_int4(picked)).float()
    scale, minimum = (t.float() if rows is None else t[rows].float() for t in (scales, minimums))
    blocks = values.view(values.shape[0], -1, BLOCK).mul_(scale[..., None]).add_(minimum[..., None])
    return blocks.view(values.shape)

"""The weight layouts the C++ CPU products read (kernels/cpu/weight_products.cpp), in plain PyTorch: tiling,
blocking, 4- and 6-bit packing and dequantization, the reference the products are tested against.

Float matrices (fp32, bf16) are stored as tiles of TILE_ROWS rows (the last one padded with zero rows), each
tile's rows interleaved LANES values at a time, with K padded with zeros to a multiple of LANES; so one tile is
one sequential stream of memory.

On CPUs with AMX tiles bf16 matrices are stored for the tile products instead (amx_tiles): per group of AMX_ROWS
rows and block of AMX_K values of K, the pairs of values of the group's rows side by side, one 1 KB tile.

Integer matrices take integer dot products instead, against activations quantized to int8 with a scale per block of
BLOCK values (as llama.cpp's Q8_0 quantizes them). Rows stay row-major, K padded with zeros to a multiple of CHUNK
and permuted within each chunk so that 32-bit lane i of the chunk's 64-byte vector j holds values 32i + 4j to 32i +
4j + 3: eight 4-byte dot products per lane sum one whole block, whose scales are applied once. int8 weights have an
fp16 scale per block (Q8_0). Affine weights of 4 or 6 bits (values 0 .. 2^bits - 1) are scale * value + minimum per
block, the block's scale an 8-bit multiple (0-255) of its chunk's scale step and its minimum its chunk's minimum
base plus an 8-bit multiple (-127..127) of the chunk's minimum step (as Q4_K and Q6_K keep 6- and 8-bit block scales
under a super-block's fp16 ones). Each chunk's eight vectors are packed into its bytes: their low nibbles (vector
2p in the low, 2p + 1 in the high nibbles of 64 bytes p), then, for 6 bits, their upper two bits (vectors 4q .. 4q +
3 in bits 0-1 .. 6-7 of 64 bytes q). An affine row is one stream of bytes: per group of GROUP_CHUNKS chunks (the
last group may hold fewer), a header of the group's block scales (uint8), block minimums (int8) and steps (fp32:
scale step, minimum step, minimum base per chunk) padded to 64 bytes, then the chunks' bytes (a row read as four
streams, its values, scales, minimums and steps apart, ran 15-30% slower): 4.75 and 6.75 bits a weight.
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


AMX_ROWS = 16  # rows of W in a group of AMX tiles
AMX_K = 32  # values of K in one of a group's blocks


def amx_tiles(matrix: torch.Tensor) -> torch.Tensor:
    """bf16 [N, K] as [N rounded up to AMX_ROWS, K rounded up to AMX_K] in AMX tile order: per group of AMX_ROWS
    rows, per block of AMX_K values, pair p (values 2p and 2p + 1) of each of the group's rows side by side."""
    rows, columns = matrix.shape
    full = matrix.new_zeros(padded(rows, AMX_ROWS), padded(columns, AMX_K))
    full[:rows, :columns] = matrix
    groups, blocks = full.shape[0] // AMX_ROWS, full.shape[1] // AMX_K
    shaped = full.view(groups, AMX_ROWS, blocks, AMX_K // 2, 2)
    return shaped.permute(0, 2, 3, 1, 4).reshape(full.shape)


def _amx_shaped(tiles: torch.Tensor) -> torch.Tensor:
    """[groups, rows of a group, blocks, pairs, 2] view of AMX tiles."""
    total, width = tiles.shape
    return tiles.view(total // AMX_ROWS, width // AMX_K, AMX_K // 2, AMX_ROWS, 2).permute(0, 3, 1, 2, 4)


def untile_amx(tiles: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """The padded matrix of amx_tiles' output, row-major (rows: a slice of whole groups, by row)."""
    shaped = _amx_shaped(tiles)
    if rows is not None:
        shaped = shaped[rows.start // AMX_ROWS : -(-rows.stop // AMX_ROWS)]
    return shaped.reshape(-1, tiles.shape[1])


def rows_of_amx_tiles(tiles: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows `indices` (any shape) of a matrix in AMX tiles, row-major: [*indices.shape, padded K]."""
    flat = indices.reshape(-1)
    picked = _amx_shaped(tiles)[flat // AMX_ROWS, flat % AMX_ROWS]  # [len, blocks, pairs, 2]
    return picked.reshape(*indices.shape, tiles.shape[1])


def block_values(values: torch.Tensor) -> torch.Tensor:
    """Row-major values [N, K] (int8, or uint8 affine values) as [N, K rounded up to CHUNK], K permuted within each
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


AFFINE_BITS = (4, 6)
UPPER_GROUP = 4  # vectors whose upper two bits share a byte
STEPS = 3  # per chunk of affine weights: scale step, minimum step, minimum base


def pack_affine(blocked: torch.Tensor, bits: int) -> torch.Tensor:
    """block_values' output of `bits`-bit values (uint8) [N, K] as bytes [N, K * bits / 8], chunk by chunk."""
    rows = blocked.shape[0]
    vectors = blocked.view(rows, -1, CHUNK // VECTOR, VECTOR)
    low = vectors & 0xF
    parts = [low[:, :, 0::2] | (low[:, :, 1::2] << 4)]
    if bits == 6:
        upper = (vectors >> 4).view(rows, -1, CHUNK // VECTOR // UPPER_GROUP, UPPER_GROUP, VECTOR)
        packed = upper[:, :, :, 0]
        for t in range(1, UPPER_GROUP):
            packed = packed | (upper[:, :, :, t] << (2 * t))
        parts.append(packed)
    return torch.cat(parts, dim=2).reshape(rows, -1)


def unpack_affine(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """pack_affine's bytes [N, K * bits / 8] back to the blocked values [N, K] (uint8)."""
    rows = packed.shape[0]
    chunks = packed.view(rows, -1, CHUNK * bits // 8 // VECTOR, VECTOR)
    nibbles = chunks[:, :, : CHUNK // VECTOR // 2, None]
    values = torch.cat((nibbles & 0xF, nibbles >> 4), dim=3).view(rows, -1, CHUNK // VECTOR, VECTOR)
    if bits == 6:
        upper = chunks[:, :, CHUNK // VECTOR // 2 :, None]
        shifts = torch.arange(0, 2 * UPPER_GROUP, 2, dtype=torch.uint8).view(1, 1, 1, UPPER_GROUP, 1)
        values = values | (((upper >> shifts) & 3) << 4).view(values.shape)
    return values.reshape(rows, -1)


GROUP_CHUNKS = 4  # chunks of an affine row behind one header
HEADER_BYTES_PER_CHUNK = 2 * (CHUNK // BLOCK) + 4 * STEPS  # its blocks' scales and minimums, its steps


def _header_bytes(chunks: int) -> int:
    return padded(chunks * HEADER_BYTES_PER_CHUNK, VECTOR)


def _groups(chunks: int):
    """(first chunk, chunks) of each group of an affine row of `chunks` chunks."""
    return [(first, min(GROUP_CHUNKS, chunks - first)) for first in range(0, chunks, GROUP_CHUNKS)]


def affine_row_bytes(columns: int, bits: int) -> int:
    """Bytes of one affine row of `columns` values (padded to whole chunks), headers included."""
    chunks = padded(columns, CHUNK) // CHUNK
    return sum(_header_bytes(count) + count * CHUNK * bits // 8 for _, count in _groups(chunks))


def interleave_affine(
    packed: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, steps: torch.Tensor, bits: int
) -> torch.Tensor:
    """pack_affine's bytes [N, K * bits / 8] with their scales, minimums [N, K / BLOCK] and steps [N, K / CHUNK,
    STEPS] as affine rows [N, affine_row_bytes(K, bits)] (uint8)."""
    rows, blocks_per_chunk, chunk_bytes = packed.shape[0], CHUNK // BLOCK, CHUNK * bits // 8
    parts = []
    for first, count in _groups(steps.shape[1]):
        blocks = slice(first * blocks_per_chunk, (first + count) * blocks_per_chunk)
        header = torch.cat(
            (
                scales[:, blocks],
                minimums[:, blocks].view(torch.uint8),
                steps[:, first : first + count].reshape(rows, -1).contiguous().view(torch.uint8),
            ),
            dim=1,
        )
        parts.append(torch.nn.functional.pad(header, (0, _header_bytes(count) - header.shape[1])))
        parts.append(packed[:, first * chunk_bytes : (first + count) * chunk_bytes])
    return torch.cat(parts, dim=1)


def split_affine(
    rows: torch.Tensor, bits: int, columns: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """interleave_affine's rows of `columns` values back to (packed bytes, scales, minimums, steps)."""
    count_rows, blocks_per_chunk, chunk_bytes = rows.shape[0], CHUNK // BLOCK, CHUNK * bits // 8
    packed, scales, minimums, steps = [], [], [], []
    at = 0
    for _, count in _groups(padded(columns, CHUNK) // CHUNK):
        blocks = count * blocks_per_chunk
        scales.append(rows[:, at : at + blocks])
        minimums.append(rows[:, at + blocks : at + 2 * blocks].view(torch.int8))
        step_bytes = rows[:, at + 2 * blocks : at + 2 * blocks + 4 * STEPS * count].contiguous()
        steps.append(step_bytes.view(torch.float32).view(count_rows, count, STEPS))
        at += _header_bytes(count)
        packed.append(rows[:, at : at + count * chunk_bytes])
        at += count * chunk_bytes
    return tuple(torch.cat(part, dim=1) for part in (packed, scales, minimums, steps))


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [M, K] in [-127, 127] as fp32, scales [M, K / BLOCK] fp32): each block of x divided by its
    largest magnitude over 127 and rounded half to even, as the integer products quantize their input."""
    blocks = x.float().view(x.shape[0], -1, BLOCK)
    scales = blocks.abs().amax(-1) / INT8_MAX
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    values = (blocks / safe[..., None]).round().clamp(-INT8_MAX, INT8_MAX)
    return values.view(x.shape), scales


def integer_product(x: torch.Tensor, dequantized: torch.Tensor) -> torch.Tensor:
    """What int8_linear and affine_linear compute, in float64: x [M, K] (zero-padded to the weights' width)
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


def dequantize_affine(
    rows: torch.Tensor, bits: int, columns: int, picked: slice | None = None
) -> torch.Tensor:
    """The padded fp32 matrix of affine rows of `columns` values (picked: a slice of its rows)."""
    packed, scales, minimums, steps = split_affine(rows if picked is None else rows[picked], bits, columns)
    values = unblock_values(unpack_affine(packed, bits)).float()
    steps = steps.view(values.shape[0], -1, 1, STEPS)
    scale = scales.float().view(*steps.shape[:2], -1) * steps[..., 0]
    minimum = minimums.float().view(*steps.shape[:2], -1) * steps[..., 1] + steps[..., 2]
    blocks = values.view(*scale.shape, BLOCK).mul_(scale[..., None]).add_(minimum[..., None])
    return blocks.view(values.shape)

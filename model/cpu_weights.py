"""Weight matrices on the CPU: kept in the checkpoint's own dtype (bf16), as int8, or as 4- or 6-bit affine values
(int4, int6), in the layouts of the C++ products (kernels/cpu), with sums in fp32.

A decode step multiplies a few rows of activations by every weight: the products widen each weight to fp32 in
registers (or, for bf16 activations, multiply bf16 pairs exactly in hardware), so the weights cost their stored
bytes (bf16 half of fp32's) and the sums are those of fp32; integer weights meet activations quantized to int8 per
block of 32 (as llama.cpp's Q8_0, Q4_K and Q6_K do), in integer dot products. A product of many rows (a prefill) is
compute-bound instead: the weights are written out dense a block of rows at a time (in one C++ pass where the
kernels are built) and multiplied densely, in bf16 for bf16 activations on a CPU that multiplies bf16 natively
(oneDNN's kernels), else in fp32.

Where the CPU has AMX tiles, bf16 matrices meeting bf16 activations are stored for tile products instead
(`bf16_amx`): a pass of up to 16 rows (a verify pass of drafted tokens) then reads the weights at the cost of one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels import cpu as cpu_kernels
from kernels.reference import weight_products as layout
from model.cpu import native_bf16
from model.quantize import quantize_affine, quantize_int8

# Rows of activations up to which the C++ products run; more rows are multiplied densely, where the flops of
# oneDNN's and MKL's kernels outweigh widening every weight block first. On two Zen 4 cores a 12,288 x 2,048
# bf16 or int8 matrix took the products 28-54 ms for 64 rows against 150 ms densely (8-11 against 70-230 ms at 16).
PRODUCT_MAX_ROWS = 64
# The same for AMX tiles, whose products of 64 rows took 3 ms against 18 for the dot products, and of 384 rows 17 ms
# against 19 densely (two Xeon cores, a 12,288 x 2,048 matrix); at 512 rows the dense products win.
AMX_PRODUCT_MAX_ROWS = 384
# Rows of weights written out dense at once by the dense path: 4 MB of bf16 (8 of fp32) at 2,048 columns.
DENSE_BLOCK_ROWS = 1024
# The affine kinds and their bits a value.
AFFINE_KINDS = {"int4": 4, "int6": 6}
# bf16 in AMX tiles (kernels/cpu/amx_products.cpp).
AMX_KIND = "bf16_amx"
QUANTIZED_KINDS = ("int8", *AFFINE_KINDS)


@dataclass(frozen=True)
class CpuWeight:
    """A [N, K] matrix stored as `kind` in the layout of its product (see kernels/reference/weight_products.py):
    tiled floats, bf16 in AMX tiles, or int8, int4 and int6 rows in dot-product blocks."""

    kind: str
    # Tiled floats; AMX tiles; int8 values in dot-product blocks; int4 and int6 rows with their scales, minimums
    # and steps.
    tiles: torch.Tensor
    shape: torch.Size
    # int8: fp16 scales per block of 32 values of a row.
    scales: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.tiles, self.scales) if t is not None)

    @property
    def padded_columns(self) -> int:
        if self.kind in QUANTIZED_KINDS:
            return layout.padded(self.shape[1], layout.CHUNK)
        return self.tiles.shape[1]

    def dequantize(self, rows: slice | None = None) -> torch.Tensor:
        """fp32 rows (default all) of the padded matrix; a slice of tiles starts at a multiple of TILE_ROWS."""
        if self.kind == "int8":
            return layout.dequantize_int8(self.tiles, self.scales, rows)
        if self.kind in AFFINE_KINDS:
            return layout.dequantize_affine(self.tiles, AFFINE_KINDS[self.kind], self.shape[1], rows)
        if self.kind == AMX_KIND:
            return layout.untile_amx(self.tiles, rows).float()
        return layout.dequantize_float(self.tiles, rows)

    def dense_rows(self, begin: int, end: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows begin .. end of the padded matrix, row-major in dtype (fp32 or bf16), for a dense product: in one
        pass by the C++ kernels where they are built, else through dequantize."""
        ops = cpu_kernels.ops()
        if ops is None:
            return self.dequantize(slice(begin, end))[: end - begin].to(dtype)
        if self.kind == "int8":
            return ops.int8_rows(self.tiles, self.scales, begin, end - begin, dtype)
        if self.kind in AFFINE_KINDS:
            bits = AFFINE_KINDS[self.kind]
            return ops.affine_rows(self.tiles, bits, begin, end - begin, self.padded_columns, dtype)
        if self.kind == AMX_KIND:
            return ops.amx_untile_rows(self.tiles, begin, end - begin, dtype)
        return ops.untile_rows(self.tiles, begin, end - begin, dtype)

    def embedding(self, tokens: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows `tokens` in dtype, as F.embedding gives them: an LM head tied to the embedding is kept once, as
        the head (a quantized head is a copy, and the embedding stays a plain tensor)."""
        if self.kind in QUANTIZED_KINDS:
            raise ValueError("a quantized matrix is never an embedding: the embedding stays as stored")
        if self.kind == AMX_KIND:
            return layout.rows_of_amx_tiles(self.tiles, tokens)[..., : self.shape[1]].to(dtype)
        return layout.rows_of_tiles(self.tiles, tokens)[..., : self.shape[1]].to(dtype)


def stored_kind(weight: torch.Tensor, quantize: str | None, activations: torch.dtype | None = None) -> str:
    """How a checkpoint matrix is kept: quantized as asked, else bf16 as stored (in AMX tiles where bf16 activations
    meet it and the CPU has them), else fp32 (exact for fp16)."""
    if quantize is not None:
        return quantize
    if weight.dtype != torch.bfloat16:
        return "float32"
    return AMX_KIND if activations == torch.bfloat16 and cpu_kernels.amx_products() else "bfloat16"


# Under int4, the matrices kept at 6 bits in some layers (see more_bits), as llama.cpp's Q4_K_M keeps them: the
# Gated DeltaNet input projection (its q, k, v, z, a and b rows; Q4_K_M raises q, k and v) and the MLP's down
# projection. The LM head is always 6-bit there.
MORE_BITS_MATRICES = ("linear_attn.in_proj.weight", "mlp.down_proj.weight")
LAYER_NAME = re.compile(r"layers\.(\d+)\.(.+)")


def more_bits(layer: int, layers: int) -> bool:
    """Whether layer (of layers) keeps its sensitive matrices at 6 bits under int4: the first and last eighth of the
    layers and every third one between them, where a 4-bit error costs most (llama.cpp's rule for Q4_K_M)."""
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2


def matrix_kind(
    name: str, weight: torch.Tensor, quantize: str | None, layers: int, activations: torch.dtype | None = None
) -> str:
    """How the model matrix `name` (of a model of `layers` layers, run in `activations`) is kept: as stored_kind
    says, except that int4 keeps the LM head and, in the layers more_bits picks, MORE_BITS_MATRICES at 6 bits."""
    if quantize != "int4":
        return stored_kind(weight, quantize, activations)
    if name == "lm_head.weight":
        return "int6"
    match = LAYER_NAME.fullmatch(name)
    if match and match[2] in MORE_BITS_MATRICES and more_bits(int(match[1]), layers):
        return "int6"
    return "int4"


def to_cpu_weight(weight: torch.Tensor, kind: str) -> CpuWeight:
    """weight [N, K] stored as kind."""
    if kind == "int8":
        values, scales = quantize_int8(weight)
        # Scales of the zero blocks that pad K to whole chunks are zeros too.
        padding = layout.padded(weight.shape[1], layout.CHUNK) // layout.BLOCK - scales.shape[1]
        return CpuWeight(kind, layout.block_values(values), weight.shape, F.pad(scales, (0, padding)))
    if kind in AFFINE_KINDS:
        bits = AFFINE_KINDS[kind]
        values, scales, minimums, steps = quantize_affine(weight, bits)
        packed = layout.pack_affine(layout.block_values(values), bits)
        return CpuWeight(kind, layout.interleave_affine(packed, scales, minimums, steps, bits), weight.shape)
    if kind == AMX_KIND:
        return CpuWeight(kind, layout.amx_tiles(weight.to(torch.bfloat16)), weight.shape)
    return CpuWeight(kind, layout.tile_rows(weight.to(getattr(torch, kind))), weight.shape)


def cpu_linear(x: torch.Tensor, weight: CpuWeight) -> torch.Tensor:
    """x @ weight.T in x's dtype, accumulated in fp32 (bf16 activations times bf16 weights are exact products)."""
    out_features, in_features = weight.shape
    flat = x.reshape(-1, in_features)
    ops = cpu_kernels.ops()
    if weight.kind == AMX_KIND:
        # AMX tiles take bf16 activations only; others meet their rows densely.
        compiled = flat.dtype == torch.bfloat16 and flat.shape[0] <= AMX_PRODUCT_MAX_ROWS
    else:
        compiled = flat.shape[0] <= PRODUCT_MAX_ROWS
    if ops is not None and compiled:
        # bf16 activations meet bf16 weights as they are (dot products in hardware where the CPU has them);
        # every other pair takes fp32 activations.
        if flat.dtype != torch.bfloat16 or weight.kind not in ("bfloat16", AMX_KIND):
            flat = flat.float()
        out = _compiled_product(ops, _padded(flat, weight), weight)
    else:
        out = _dense_product(_padded(flat, weight), weight)
    return out.view(*x.shape[:-1], out_features).to(x.dtype)


def _padded(x: torch.Tensor, weight: CpuWeight) -> torch.Tensor:
    if x.shape[1] != weight.padded_columns:
        x = F.pad(x, (0, weight.padded_columns - x.shape[1]))
    return x.contiguous()


def _compiled_product(ops, x: torch.Tensor, weight: CpuWeight) -> torch.Tensor:
    if weight.kind == "int8":
        return ops.int8_linear(x, weight.tiles, weight.scales)
    if weight.kind in AFFINE_KINDS:
        return ops.affine_linear(x, weight.tiles, AFFINE_KINDS[weight.kind])
    if weight.kind == AMX_KIND:
        return ops.amx_bf16_linear(x, weight.tiles, weight.shape[0])
    if x.dtype == torch.bfloat16:
        return ops.bf16_dot_linear(x, weight.tiles, weight.shape[0])
    return ops.float_linear(x, weight.tiles, weight.shape[0])


def _dense_product(x: torch.Tensor, weight: CpuWeight) -> torch.Tensor:
    n = weight.shape[0]
    # bf16 activations take bf16 products where the CPU has them (several times fp32's flops); elsewhere torch
    # widens bf16 in software, slower than fp32.
    dense_dtype = torch.bfloat16 if x.dtype == torch.bfloat16 and native_bf16() else torch.float32
    inputs = x.to(dense_dtype)
    out = torch.empty(x.shape[0], n, dtype=dense_dtype)
    for begin in range(0, n, DENSE_BLOCK_ROWS):
        end = min(begin + DENSE_BLOCK_ROWS, n)
        out[:, begin:end] = F.linear(inputs, weight.dense_rows(begin, end, dense_dtype))
    return out

"""Builds the C++ CPU kernels at one instruction-set level (kernels/cpu/isa.py) and checks each product and fused
step against the torch reference: run as `python -m tests.kernels.other_isa_products LEVEL BUILD_DIR` in a process
of its own, since the library registers the same operators as the one the engine builds. Prints the instructions
the build uses, then the largest relative error."""

from __future__ import annotations

import sys

import torch
from torch.utils.cpp_extension import get_cxx_compiler, load

import kernels
from kernels.cpu import LIBRARY_SOURCE, compile_flags, isa, library_name, openmp
from kernels.reference import attention as attention_ref
from kernels.reference import rms_norm as norm_ref
from kernels.reference import weight_products as layout
from tests.kernels.cpu_step_inputs import copies, layer_inputs, torch_reference
from tests.kernels.integer_weights import (
    INTEGER_KINDS,
    dequantized,
    random_integer_weights,
    run_integer_product,
)

SHAPES = [(37, 64), (1029, 128), (5, 48), (4099, 2048)]


def check(ops) -> float:
    """The largest error of any product over the largest magnitude of its reference."""
    generator = torch.Generator().manual_seed(0)
    worst = 0.0
    for n, k in SHAPES:
        weight = torch.randn(n, k, generator=generator) * 0.02
        for rows in (1, 3, 5, 8):
            x = torch.randn(rows, k, generator=generator)
            for kind in ("float32", "bfloat16", "bf16_dot", *INTEGER_KINDS):
                out = torch.full((rows, n), float("nan"))
                if kind in INTEGER_KINDS:
                    parts = random_integer_weights(kind, n, k, generator)
                    padded_x = torch.nn.functional.pad(x, (0, dequantized(kind, parts).shape[1] - k))
                    run_integer_product(ops, kind, padded_x, parts, out)
                    want = layout.integer_product(x, dequantized(kind, parts))
                    worst = max(worst, _error(out, want, f"{kind} {n}x{k}, {rows} rows"))
                    worst = max(worst, _check_dense_rows(ops, kind, parts))
                    continue
                tiles = layout.tile_rows(weight if kind == "float32" else weight.bfloat16())
                dense = layout.dequantize_float(tiles)
                untiled = torch.full_like(dense, float("nan"))
                ops.untile_rows.out(tiles, 0, untiled)
                worst = max(worst, _error(untiled, dense.double(), f"{kind} dense rows"))
                if kind == "bf16_dot":
                    x = x.bfloat16()
                    ops.bf16_dot_linear.out(x, tiles, out)
                else:
                    ops.float_linear.out(x, tiles, out)
                want = x.double() @ dense[:n, :k].double().T
                worst = max(worst, _error(out, want, f"{kind} {n}x{k}, {rows} rows"))
                x = x.float()
    return max(worst, _check_largest_values(ops, generator), _check_steps(ops, generator))


def _check_largest_values(ops, generator: torch.Generator) -> float:
    """The 4- and 6-bit products with every value at its largest and x quantized to +-127 everywhere: the most the
    integer sums of a chunk can hold, where a level that adds 16-bit sums before widening them would overflow."""
    worst, n, k = 0.0, 16, 2 * layout.CHUNK
    for bits in (4, 6):
        blocked = layout.block_values(torch.full((n, k), 2**bits - 1, dtype=torch.uint8))
        blocks, chunks = blocked.shape[1] // layout.BLOCK, blocked.shape[1] // layout.CHUNK
        scales = torch.randint(0, 256, (n, blocks), dtype=torch.uint8, generator=generator)
        minimums = torch.randint(-127, 128, (n, blocks), dtype=torch.int8, generator=generator)
        steps = torch.randn(n, chunks, layout.STEPS, generator=generator) * torch.tensor([1e-4, 5e-4, 0.05])
        rows = layout.interleave_affine(layout.pack_affine(blocked, bits), scales, minimums, steps, bits)
        dense = layout.dequantize_affine(rows, bits, k)
        for sign in (1.0, -1.0):
            x = torch.full((3, k), sign)
            out = torch.full((3, n), float("nan"))
            ops.affine_linear.out(x, rows, bits, out)
            worst = max(
                worst, _error(out, layout.integer_product(x, dense), f"int{bits} at its largest values")
            )
    return worst


def _check_dense_rows(ops, kind: str, parts: tuple[torch.Tensor, ...]) -> float:
    """The largest error of a kind's rows written out dense (fp32), from row 1 to the end."""
    want = dequantized(kind, parts)[1:]
    out = torch.full_like(want, float("nan"))
    if kind == "int8":
        ops.int8_rows.out(parts[0], parts[1], 1, out)
    else:
        ops.affine_rows.out(parts[0], parts[1], 1, out)
    return _error(out, want.double(), f"{kind} dense rows")


def _check_steps(ops, generator: torch.Generator) -> float:
    """The largest error of the fused Gated DeltaNet layer, attention and norm steps (fp32, two rows)."""

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    args = layer_inputs(2, 1, 2, 4, 32, 16, torch.float32, seed=int(rand(1).abs() * 1000))
    want_args = copies(args)
    with torch_reference():
        want = kernels.gated_delta_net(*want_args)
    out = torch.full_like(want, float("nan"))
    ops.gated_delta_net_step.out(*args, None, None, None, out)
    worst = max(
        _error(out, want.double(), "gated delta net step"), _error(args[5], want_args[5].double(), "state")
    )
    query, gate, k_cache, v_cache = rand(2, 1, 4, 32), rand(2, 1, 4, 32), rand(2, 2, 9, 32), rand(2, 2, 9, 32)
    start = torch.tensor([8, 3])
    want = attention_ref.attention(query, k_cache, v_cache, gate, start, 0.2)
    out = torch.full_like(query, float("nan"))
    ops.attention_step.out(query, k_cache, v_cache, gate, start, 0.2, out)
    worst = max(worst, _error(out, want.double(), "attention step"))
    x, weight = rand(3, 40), rand(40)
    out = torch.full_like(x, float("nan"))
    ops.rms_norm_rows.out(x, weight, 1e-6, True, torch.empty(0), torch.empty(0), out)
    return max(worst, _error(out, norm_ref.rms_norm(x, weight, 1e-6).double(), "rms norm"))


def _error(out: torch.Tensor, want: torch.Tensor, what: str) -> float:
    if out.isnan().any():
        raise AssertionError(f"{what}: outputs left unwritten")
    return ((out.double() - want).abs().max() / want.abs().max()).item()


if __name__ == "__main__":
    level, build_dir = sys.argv[1], sys.argv[2]
    load(
        name=library_name(level),
        sources=[str(LIBRARY_SOURCE)],
        extra_cflags=compile_flags(isa.compile_flags(level), get_cxx_compiler()),
        extra_ldflags=list(openmp.flags(get_cxx_compiler())),
        is_python_module=False,
        build_directory=build_dir,
    )
    print(torch.ops.sqlscout_cpu.instructions())
    print(check(torch.ops.sqlscout_cpu))

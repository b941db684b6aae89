"""Compiles every Triton kernel for the H200 (sm_90) without a GPU; prints the results as JSON.

Run as `python -m tests.kernels.sm90_compile` with TRITON_INTERPRET unset: interpreted kernels cannot be compiled.
"""

from __future__ import annotations

import json

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.ops import (
    attention_decode,
    attention_prefill,
    causal_conv1d,
    gated_delta_rule,
    gated_rms_norm,
    rms_norm,
    rotary,
    swiglu,
)

H200 = GPUTarget("cuda", 90, 32)
FLOAT_ARGS = {"eps", "scale", "qk_scale"}

BF16 = {"*": "*bf16", "start_ptr": "*i64", "positions_ptr": "*i64", "inv_freq_ptr": "*fp32"}
PARTIALS = {"partial_out_ptr": "*fp32", "partial_lse_ptr": "*fp32"}
GDN = {"*": "*fp32", **{f"{n}_ptr": "*bf16" for n in ("q", "k", "v", "a", "b", "out")}}
DOT = {"LOW_PRECISION_DOT": True, "DOT_PRECISION": "tf32"}

KERNELS = {
    "rms_norm": (rms_norm._rms_norm_kernel, BF16, {"ZERO_CENTERED": True, "HAS_RESIDUAL": True, "BLOCK": 2048}, 8, 3),
    "gated_rms_norm": (gated_rms_norm._gated_rms_norm_kernel, BF16, {"BLOCK": 128}, 4, 3),
    "swiglu": (swiglu._swiglu_kernel, BF16, {"BLOCK": swiglu.BLOCK}, 4, 3),
    "rotary": (rotary._rotary_kernel, BF16, {"HALF": 32, "BLOCK_D": 256}, 2, 3),
    "attention prefill": (
        attention_prefill._attention_prefill_kernel, BF16,
        {"HEAD_DIM": 256, "BLOCK_D": 256, "BLOCK_M": 64, "BLOCK_N": 64, **DOT}, 4, 2,
    ),
    "attention decode": (
        attention_decode._decode_split_kernel, {**BF16, **PARTIALS},
        {"HEAD_DIM": 256, "BLOCK_D": 256, "BLOCK_G": 16, "BLOCK_N": attention_decode.BLOCK_N, **DOT}, 4, 3,
    ),
    "attention decode combine": (
        attention_decode._decode_combine_kernel, {**BF16, **PARTIALS},
        {"HEAD_DIM": 256, "BLOCK_D": 256, "BLOCK_S": attention_decode.MAX_SPLITS, "SPLITS_PER_STEP": 8}, 4, 3,
    ),
    "causal conv1d": (
        causal_conv1d._causal_conv1d_kernel, BF16,
        {"WIDTH": 4, "BLOCK_T": causal_conv1d.BLOCK_T, "BLOCK_C": causal_conv1d.BLOCK_C}, 4, 3,
    ),
    "conv state update": (
        causal_conv1d._conv_state_update_kernel, BF16,
        {"HISTORY": 3, "BLOCK_H": 4, "BLOCK_C": causal_conv1d.BLOCK_C}, 4, 3,
    ),
    "gdn chunk prepare": (
        gated_delta_rule._chunk_prepare_kernel, GDN,
        {"DK": 128, "DV": 128, "CHUNK": 64, "SUB": 16, "DOT_PRECISION": "tf32"}, 8, 3,
    ),
    "gdn chunk scan": (
        gated_delta_rule._chunk_scan_kernel, GDN,
        {"DK": 128, "DV": 128, "BV": 32, "CHUNK": 64, "DOT_PRECISION": "tf32"}, 4, 1,
    ),
    "gdn recurrent": (gated_delta_rule._recurrent_kernel, GDN, {"DK": 128, "DV": 128, "BV": 16}, 4, 3),
}  # fmt: skip


def _signature(kernel: triton.JITFunction, types: dict[str, str], constexprs: dict) -> dict[str, str]:
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = types.get(name, types["*"])
        else:
            signature[name] = "fp32" if name in FLOAT_ARGS else "i32"
    return signature


def compile_all() -> dict[str, dict]:
    """Per kernel: the shared memory its sm_90 build needs, or the compiler's error."""
    results = {}
    for name, (kernel, types, constexprs, num_warps, num_stages) in KERNELS.items():
        source = ASTSource(kernel, _signature(kernel, types, constexprs), constexprs)
        options = {"num_warps": num_warps, "num_stages": num_stages}
        try:
            compiled = triton.compile(source, target=H200, options=options)
            results[name] = {"shared": compiled.metadata.shared, "cubin": bool(compiled.asm["cubin"])}
        except Exception as error:  # reported to the test, which fails with the compiler's message
            results[name] = {"error": f"{type(error).__name__}: {error}"[-2000:]}
    return results


if __name__ == "__main__":
    print(json.dumps(compile_all()))

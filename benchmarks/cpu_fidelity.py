"""How far int8 and int4 weights (int4: some matrices at 6 bits) move the model from its bf16 weights, on random checkpoints (the real Qwen3.5-2B
text shapes and the tiny test models), and how far llama.cpp's Q8_0 and Q4_K_M move the same checkpoint.

`python -m benchmarks.cpu_fidelity [--prompt-tokens 128] [--greedy-tokens 300] [--no-real-size] [--no-llama-cpp]
[--no-record]` runs each checkpoint with bf16 weights (the reference), int8 and int4 weights (bf16 activations
too) and, for scale, fp32 activations, and reports: the weights' relative error, the residual stream's relative
error after each layer, the next-token logits' error and top-1 agreement at every prompt position, and on the
tiny models the greedy tokens shared over a few hundred steps. At the real size llama.cpp's own logits for the
same token ids (BF16, Q8_0 and Q4_K_M files of the checkpoint, benchmarks.llama_cpp) are compared with the same
reference. Recorded in benchmarks/RESULTS.md under "CPU weights: fidelity".
"""

from __future__ import annotations

import argparse
import datetime
import gc
import platform
import tempfile
from pathlib import Path

import configargparse
import torch

from benchmarks import tables
from benchmarks.model_results import record_section
from benchmarks.random_checkpoint import write_tiny_checkpoint
from benchmarks.tables import CurrentTable
from model.cache import ModelCache
from model.cpu_weights import QUANTIZED_KINDS, CpuWeight
from model.engine import Engine
from model.engine_options import EngineOptions
from model.linear import embedding
from model.loader import load_weights
from model.sampling_params import SamplingParams

SECTION = "CPU weights: fidelity"
VARIANTS = {
    "bf16": dict(dtype="bfloat16"),
    "int8": dict(dtype="bfloat16", quantize="int8"),
    "int4": dict(dtype="bfloat16", quantize="int4"),
}
QUANTIZED = ("int8", "int4")
LLAMA_CPP_TYPES = ("BF16", "Q8_0", "Q4_K_M")
SCALE = {"fp32": dict(dtype="float32")}  # what bf16 itself changes, for scale
# The tiny test models: the default one (text layout, tied head) and the published layout with odd sizes.
TINY = {
    "tiny text, tied head": dict(seed=0),
    "tiny vision-language, untied head": dict(
        seed=1,
        vision_language=True,
        text_config=dict(
            vocab_size=1000,
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=5,
            tie_word_embeddings=False,
        ),
    ),
}


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


@torch.inference_mode()
def _run(engine: Engine, prompt: list[int], greedy_tokens: int) -> dict:
    """The residual stream after each layer [T, H], the logits at every position [T, V] and greedy tokens."""
    model = engine.model
    tokens = torch.tensor([prompt])
    start = torch.zeros(1, dtype=torch.long)
    positions = torch.arange(len(prompt))[None]
    cache = ModelCache.allocate(engine.config, 1, len(prompt) + 1, engine.device, engine.dtype)
    x, residual, streams = embedding(tokens, model.weights["embed_tokens.weight"], model.dtype), None, []
    for i in range(engine.config.num_hidden_layers):
        x, residual = model.layer(i, x, residual, positions, start, cache)
        streams.append((x.float() + residual.float())[0])
    logits = model.logits(x, residual)[0]
    greedy = []
    if greedy_tokens:
        session = engine.new_session(max_tokens=len(prompt) + greedy_tokens)
        session.append(prompt)
        greedy = session.generate(greedy_tokens, SamplingParams(temperature=0), stop_ids=set())[0]
    return {"streams": streams, "logits": logits, "greedy": greedy}


def _weight_error(quantized: dict, reference: dict) -> float:
    """Relative Frobenius error of the quantized weights against the bf16 ones, over all quantized matrices."""
    error = total = 0.0
    for name, weight in quantized.items():
        if isinstance(weight, CpuWeight) and weight.kind in QUANTIZED_KINDS:
            rows, columns = weight.shape
            dense = reference[name].dequantize()[:rows, :columns]
            error += (weight.dequantize()[:rows, :columns] - dense).norm().item() ** 2
            total += dense.norm().item() ** 2
    return (error / total) ** 0.5


def _logits_comparison(logits: torch.Tensor, want: torch.Tensor) -> dict:
    return {
        "next_logits_max_error": ((logits[-1] - want[-1]).abs().max() / want[-1].abs().max()).item(),
        "logits_relative_error": _relative(logits, want),
        "top1_agreement": (logits.argmax(-1) == want.argmax(-1)).float().mean().item(),
    }


def compare(model_dir: Path, prompt_tokens: int, greedy_tokens: int, llama_cpp: bool = False) -> dict:
    """Each variant of one checkpoint against bf16, loading one engine at a time; with llama_cpp also
    llama.cpp's files of it."""
    runs, weight_errors = {}, {}
    for name, settings in {**VARIANTS, **SCALE}.items():
        engine = Engine.load(
            model_dir, EngineOptions(device="cpu", max_context=prompt_tokens + greedy_tokens + 8, **settings)
        )
        prompt = torch.randint(
            0, engine.config.vocab_size, (prompt_tokens,), generator=torch.Generator().manual_seed(7)
        ).tolist()
        runs[name] = _run(engine, prompt, greedy_tokens)
        if name in QUANTIZED:
            plain = load_weights(model_dir, engine.config, engine.device, torch.bfloat16)
            weight_errors[name] = _weight_error(engine.model.weights, plain)
            del plain
        del engine
        gc.collect()
    reference = runs["bf16"]
    result = {"weight_relative_error": weight_errors, "layers": len(reference["streams"]), "llama_cpp": {}}
    if llama_cpp:
        from benchmarks.llama_cpp.convert import gguf_files
        from benchmarks.llama_cpp.logits import llama_logits

        for kind, path in gguf_files(model_dir).items():
            logits = llama_logits(path, prompt, torch.get_num_threads())
            result["llama_cpp"][kind] = _logits_comparison(logits, reference["logits"])
    for name in (*QUANTIZED, "fp32"):
        run = runs[name]
        logits, want = run["logits"], reference["logits"]
        first_difference = next(
            (i for i, (a, b) in enumerate(zip(run["greedy"], reference["greedy"], strict=True)) if a != b),
            len(reference["greedy"]),
        )
        result[name] = {
            "stream_errors": [
                _relative(a, b) for a, b in zip(run["streams"], reference["streams"], strict=True)
            ],
            **_logits_comparison(logits, want),
            "greedy_identical_prefix": first_difference,
            "greedy_same_fraction": (
                sum(a == b for a, b in zip(run["greedy"], reference["greedy"], strict=True))
                / len(run["greedy"])
                if run["greedy"]
                else None
            ),
        }
    return result


def current(results: dict[str, dict], date: str) -> CurrentTable:
    """How far each kind of weights moves the largest checkpoint's logits, llama.cpp's files beside them."""
    checkpoint, result = next(iter(results.items()))
    rows = []
    for name in (*QUANTIZED, "fp32"):
        weight_error = result["weight_relative_error"].get(name)
        rows.append(
            [name, "–" if weight_error is None else f"{weight_error:.4f}", *_logit_cells(result[name])]
        )
    rows += [[f"llama.cpp {kind}", "–", *_logit_cells(r)] for kind, r in result["llama_cpp"].items()]
    return CurrentTable(
        key="cpu_fidelity",
        title="CPU weights: how far they move the logits",
        section=SECTION,
        command="python -m benchmarks.cpu_fidelity",
        machine=platform.machine(),
        date=date,
        columns=[
            "weights",
            "weights rel. error",
            "next-token logits max error",
            "all-position logits rel. error",
            "top-1 agreement",
        ],
        rows=rows,
        note=f"{checkpoint}, random weights, against the same checkpoint with bf16 weights; llama.cpp's rows are "
        "its logits from its own files of the checkpoint.",
    )


def _logit_cells(r: dict) -> list[str]:
    return [
        f"{r['next_logits_max_error']:.4f}",
        f"{r['logits_relative_error']:.4f}",
        f"{r['top1_agreement']:.1%}",
    ]


def report(results: dict[str, dict], prompt_tokens: int, greedy_tokens: int) -> str:
    lines = [
        f"Machine: {platform.machine()}; date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}. Random "
        f"checkpoints; a {prompt_tokens}-token random prompt. Reference: the same checkpoint with bf16 weights. "
        "int8: a scale per 32 values of a row; int4: 4-bit values with a scale and a minimum per 32 values (8-bit "
        "multiples of steps per 512), fitted by least squares from a few starts, with the LM head and, in half the "
        "layers, the Gated DeltaNet input and MLP down projections at 6 bits as Q4_K_M keeps them (both with bf16 "
        "activations, quantized to int8 per 32 values in the decode products); "
        "fp32: fp32 activations, to show how much bf16 itself moves the model. "
        "llama.cpp: its logits for the same token ids from its BF16, Q8_0 and Q4_K_M files of the checkpoint "
        "(its own conversion and quantization), against the same reference. Stream error: relative L2 error of the residual stream after a layer. "
        "Logits: max error at the last position over the largest logit, relative L2 over all positions, and "
        "the share of prompt positions whose top-1 token agrees.",
        "",
        "| checkpoint | against bf16 | weights rel. error | stream error, layer 1 / middle / last | next-token "
        "logits max error | all-position logits rel. error | top-1 agreement | greedy tokens identical "
        f"(first difference, of {greedy_tokens}) | greedy same position by position |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for checkpoint, result in results.items():
        for name in (*QUANTIZED, "fp32"):
            r = result[name]
            streams = r["stream_errors"]
            layers = f"{streams[0]:.4f} / {streams[len(streams) // 2]:.4f} / {streams[-1]:.4f}"
            weight_error = result["weight_relative_error"].get(name)
            weights = "–" if weight_error is None else f"{weight_error:.4f}"
            greedy = (
                f"{r['greedy_identical_prefix']} | {r['greedy_same_fraction']:.0%}"
                if r["greedy_same_fraction"] is not None
                else "– | –"
            )
            lines.append(
                f"| {checkpoint} | {name} | {weights} | {layers} | {r['next_logits_max_error']:.4f} | "
                f"{r['logits_relative_error']:.4f} | {r['top1_agreement']:.1%} | {greedy} |"
            )
        for kind, r in result["llama_cpp"].items():
            lines.append(
                f"| {checkpoint} | llama.cpp {kind} | – | – | {r['next_logits_max_error']:.4f} | "
                f"{r['logits_relative_error']:.4f} | {r['top1_agreement']:.1%} | – | – |"
            )
    for checkpoint, result in results.items():
        for name in QUANTIZED:
            errors = ", ".join(f"{e:.4f}" for e in result[name]["stream_errors"])
            lines += [
                "",
                f"{checkpoint}, {name} stream error after each of the {result['layers']} layers: {errors}.",
            ]
    return "\n".join(lines)


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.cpu_fidelity", description=__doc__)
    parser.add_argument(
        "--prompt-tokens", type=int, default=128, env_var="SQLSCOUT_BENCH_PROMPT_TOKENS", help="prompt length"
    )
    parser.add_argument(
        "--greedy-tokens",
        type=int,
        default=300,
        env_var="SQLSCOUT_BENCH_GREEDY_TOKENS",
        help="greedy tokens compared on the tiny models",
    )
    parser.add_argument(
        "--real-size",
        action=argparse.BooleanOptionalAction,
        default=True,
        env_var="SQLSCOUT_BENCH_REAL_SIZE",
        help="include the real Qwen3.5-2B shapes (random bf16 checkpoint kept in the cache directory)",
    )
    parser.add_argument(
        "--llama-cpp",
        action=argparse.BooleanOptionalAction,
        default=True,
        env_var="SQLSCOUT_BENCH_LLAMA_CPP",
        help="with --real-size: compare llama.cpp's BF16, Q8_0 and Q4_K_M logits too (builds llama.cpp once)",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    results = {}
    if args.real_size:
        from benchmarks.real_size_checkpoint import real_size_checkpoint

        results["Qwen3.5-2B shapes"] = compare(real_size_checkpoint(), args.prompt_tokens, 0, args.llama_cpp)
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in TINY.items():
            directory = write_tiny_checkpoint(Path(tmp) / str(spec["seed"]), **spec)
            results[name] = compare(directory, args.prompt_tokens, args.greedy_tokens)
    text = report(results, args.prompt_tokens, args.greedy_tokens)
    if not args.no_record:
        record_section(SECTION, text)
        tables.record(current(results, tables.now()))
    print(text)


if __name__ == "__main__":
    main()

"""GPU benchmark: batch-1 decode of Qwen3.5-2B shapes (random weights) against the bandwidth limit and transformers.

`python -m benchmarks.model_decode [--out DIR] [--context 4096] [--new-tokens 256] [--shapes 2b|tiny]` measures
our engine's decode tokens/s at the given context, transformers' eager `generate` on the same weights, and
the agent-turn overhead (append a 400-token tool result, then the first new token). `run(out_dir)` returns
the numbers as a dict and writes model_decode.json; the summary is printed last.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import configargparse
import torch

from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams

QWEN35_2B = dict(
    vocab_size=248320,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=24,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    full_attention_interval=4,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
)
# The same structure at toy size, to check the script itself without a GPU.
TINY = {
    **QWEN35_2B,
    "vocab_size": 1024,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}
SHAPES = {"2b": QWEN35_2B, "tiny": TINY}
DEVICE_COPY_BYTES_PER_S = 4.3e12  # measured H200 device copy (specs/targets.md)
TOOL_RESULT_TOKENS = 400
GREEDY = SamplingParams(temperature=0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, function) -> tuple[float, object]:
    """(seconds, value) of function(), the device synchronised before and after."""
    _sync(device)
    started = time.perf_counter()
    value = function()
    _sync(device)
    return time.perf_counter() - started, value


def build_checkpoint(shapes: dict, directory: Path, device: torch.device, dtype: torch.dtype):
    """transformers' model with random weights on device, saved to directory and loaded by our engine."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    with torch.device(device):
        reference = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**shapes)).to(dtype).eval()
    reference.save_pretrained(directory)
    Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    return reference


def decode_bytes_per_token(engine: Engine, context: int) -> float:
    """Bytes one batch-1 decode step must move: weights once, GDN states read and written, the KV cache read."""
    weights = {t.data_ptr(): t.numel() * t.element_size() for t in engine.model.weights.values()}
    session_state = engine.new_session(max_tokens=1).cache
    states = sum(t.numel() * t.element_size() for t in session_state.conv + session_state.recurrent)
    c = engine.config
    kv_per_token = (
        2 * c.num_key_value_heads * c.head_dim * engine.dtype.itemsize * c.layer_types.count("full_attention")
    )
    return sum(weights.values()) + 2 * states + kv_per_token * context


def run(
    out_dir: str | Path | None = None,
    *,
    context: int = 4096,
    new_tokens: int = 256,
    shapes: str = "2b",
    reference_tokens: int = 32,
) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = SHAPES[shapes]
    with tempfile.TemporaryDirectory() as tmp:
        reference = build_checkpoint(config, Path(tmp), device, dtype)
        engine = Engine.load(
            tmp,
            EngineOptions(
                device=device.type,
                dtype=str(dtype).removeprefix("torch."),
                max_context=context + new_tokens + 4 * TOOL_RESULT_TOKENS,
            ),
        )
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, config["vocab_size"], (context,), generator=generator).tolist()
    tool_result = torch.randint(0, config["vocab_size"], (TOOL_RESULT_TOKENS,), generator=generator).tolist()

    session = engine.new_session()
    prefill_s, _ = timed(device, lambda: session.append(prompt))
    at_prompt = session.snapshot()
    session.generate(16, GREEDY, stop_ids=set())  # compiles kernels and captures the decode graph
    session.restore(at_prompt)
    decode_s, ours = timed(device, lambda: session.generate(new_tokens, GREEDY, stop_ids=set())[0])
    # The first token comes from the prefill's logits; every further one is a decode step.
    ours_tokens_per_s = (len(ours) - 1) / decode_s

    overheads = []
    for _ in range(5):
        session.restore(at_prompt)
        seconds, _ = timed(device, lambda: (session.append(tool_result), session.generate(1, GREEDY, set())))
        overheads.append(seconds)
    turn_ms = statistics.median(overheads[1:]) * 1000

    prompt_tensor = torch.tensor([prompt], device=device)
    with torch.inference_mode():
        reference_logits = reference(prompt_tensor, logits_to_keep=1).logits[0, -1].float()

        def theirs(count: int):
            return reference.generate(
                prompt_tensor, max_new_tokens=count, min_new_tokens=count, do_sample=False
            )

        theirs(2)
        one_s, _ = timed(device, lambda: theirs(1))
        many_s, theirs_ids = timed(device, lambda: theirs(reference_tokens + 1))
    theirs_tokens_per_s = reference_tokens / (many_s - one_s)
    theirs_list = theirs_ids[0, context:].tolist()
    agree = next(
        (i for i, (a, b) in enumerate(zip(ours, theirs_list, strict=False)) if a != b),
        min(len(ours), len(theirs_list)),
    )
    session.restore(at_prompt)
    logits_error = (
        (session.last_logits[0] - reference_logits).abs().max() / reference_logits.abs().max()
    ).item()

    limit = DEVICE_COPY_BYTES_PER_S / decode_bytes_per_token(engine, context + new_tokens // 2)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "shapes": shapes,
        "dtype": str(dtype).removeprefix("torch."),
        "context": context,
        "new_tokens": new_tokens,
        "cuda_graph": engine.cuda_graph,
        "prefill_ms": prefill_s * 1000,
        "decode_tokens_per_s": ours_tokens_per_s,
        "bandwidth_limit_tokens_per_s": limit,
        "fraction_of_limit": ours_tokens_per_s / limit,
        "transformers_decode_tokens_per_s": theirs_tokens_per_s,
        "ratio_vs_transformers": ours_tokens_per_s / theirs_tokens_per_s,
        "agent_turn_overhead_ms": turn_ms,
        "greedy_tokens_matching_transformers": agree,
        "last_logits_relative_error": logits_error,
    }
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "model_decode.json").write_text(json.dumps(result, indent=2))
    return result


def summary(r: dict) -> str:
    return "\n".join(
        [
            f"model decode, {r['shapes']} shapes, {r['dtype']}, {r['device']}, CUDA graph {r['cuda_graph']}",
            f"prefill {r['context']} tokens: {r['prefill_ms']:.1f} ms",
            f"batch-1 decode at {r['context']} context: {r['decode_tokens_per_s']:.1f} tokens/s = "
            f"{100 * r['fraction_of_limit']:.1f}% of the {r['bandwidth_limit_tokens_per_s']:.0f} tokens/s bandwidth limit "
            "(target >= 700 tokens/s on an H200)",
            f"transformers eager generate: {r['transformers_decode_tokens_per_s']:.1f} tokens/s; "
            f"ratio {r['ratio_vs_transformers']:.1f}x (target >= 10x)",
            f"agent turn (append {TOOL_RESULT_TOKENS} tokens + first new token): {r['agent_turn_overhead_ms']:.2f} ms "
            "(target <= 5 ms)",
            f"against transformers: last-position logits relative error {r['last_logits_relative_error']:.2e}, "
            f"first {r['greedy_tokens_matching_transformers']} greedy tokens identical",
        ]
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.model_decode", description=__doc__)
    parser.add_argument(
        "--out", type=Path, env_var="SQLSCOUT_BENCH_OUT", help="directory for model_decode.json"
    )
    parser.add_argument(
        "--context", type=int, default=4096, env_var="SQLSCOUT_BENCH_CONTEXT", help="tokens before decoding"
    )
    parser.add_argument(
        "--new-tokens", type=int, default=256, env_var="SQLSCOUT_BENCH_NEW_TOKENS", help="tokens decoded"
    )
    parser.add_argument(
        "--shapes", choices=tuple(SHAPES), default="2b", env_var="SQLSCOUT_BENCH_SHAPES", help="model shapes"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    print(summary(run(args.out, context=args.context, new_tokens=args.new_tokens, shapes=args.shapes)))


if __name__ == "__main__":
    main()

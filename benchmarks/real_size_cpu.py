"""One engine at the real Qwen3.5-2B size on the CPU, measured in a process of its own so that its load time and
peak memory are its own: `python -m benchmarks.real_size_cpu VARIANT --model DIR --threads N` prints one JSON
line (benchmarks.model_cpu --real-size runs every variant this way and writes the report).

The measures follow an agent episode: a 700-token prompt, tool results of 300 tokens appended at about 2k
tokens of context, and greedy decoding there.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.weight_stream import weight_stream

PROMPT_TOKENS = 700
APPEND_TOKENS = 300
APPEND_CONTEXT = 2000  # tokens in the sequence once the timed append is in
FLOOR_PASSES = 3
# name -> (engine, settings); the sqlscout entries are Engine.load keywords, None meaning its default.
VARIANTS: dict[str, tuple[str, dict]] = {
    "sqlscout-default": ("sqlscout", {}),
    "sqlscout-fp32": ("sqlscout", {"dtype": torch.float32}),
    "sqlscout-bf16": ("sqlscout", {"dtype": torch.bfloat16}),
    "sqlscout-int8": ("sqlscout", {"quantize": "int8"}),
    "sqlscout-int8-compiled": ("sqlscout", {"quantize": "int8", "compile_decode": True}),
    "transformers-bf16": ("transformers", {}),
}


def _timed(function: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def _ids(count: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(0, vocab, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


def measure_sqlscout(
    model_dir: Path, threads: int, decode_tokens: int, cache_dir: Path, settings: dict
) -> dict:
    from model.engine import Engine
    from model.int8_weights import Int8Weight
    from model.sampling_params import SamplingParams

    load_s, engine = _timed(
        lambda: Engine.load(
            model_dir, device="cpu", threads=threads, max_context=4096, cache_dir=cache_dir, **settings
        )
    )
    vocab = engine.config.vocab_size
    session = engine.new_session(max_tokens=APPEND_CONTEXT + decode_tokens + 8)
    prefill_s, _ = _timed(lambda: session.append(_ids(PROMPT_TOKENS, vocab, 1)))
    session.append(_ids(APPEND_CONTEXT - APPEND_TOKENS - PROMPT_TOKENS, vocab, 2))
    append_s, _ = _timed(lambda: session.append(_ids(APPEND_TOKENS, vocab, 3)))
    greedy = SamplingParams(temperature=0)
    # The first call compiles the step where it is compiled; its time counts as the compile.
    first_s, _ = _timed(lambda: session.generate(2, greedy, stop_ids=set()))
    # A generate() of n tokens runs n - 1 decode steps: the first token comes from the last logits.
    decode_s, _ = _timed(lambda: session.generate(decode_tokens + 1, greedy, stop_ids=set()))
    matrices = [
        w for name, w in engine.model.weights.items() if name.endswith(("proj.weight", "lm_head.weight"))
    ]
    weight_bytes, stream = weight_stream(matrices, engine.dtype)
    return {
        "dtype": str(engine.dtype).removeprefix("torch."),
        "int8": any(isinstance(w, Int8Weight) for w in matrices),
        "compiled": engine.compile_decode,
        "load_s": load_s,
        "prefill_s": prefill_s,
        "append_s": append_s,
        "first_decode_call_s": first_s,
        "decode_tokens_per_s": decode_tokens / decode_s,
        "weight_bytes": weight_bytes,
        "floor_s": _floor(stream),
    }


def measure_transformers(model_dir: Path, threads: int, decode_tokens: int) -> dict:
    from transformers import Qwen3_5ForCausalLM

    torch.set_num_threads(threads)
    load_s, model = _timed(lambda: Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval())
    vocab = model.config.vocab_size
    cache = None

    @torch.inference_mode()
    def forward(ids: list[int]) -> torch.Tensor:
        nonlocal cache
        # Logits of the last position only, as generate() asks for them.
        out = model(torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        return out.logits[0, -1]

    prefill_s, _ = _timed(lambda: forward(_ids(PROMPT_TOKENS, vocab, 1)))
    forward(_ids(APPEND_CONTEXT - APPEND_TOKENS - PROMPT_TOKENS, vocab, 2))
    append_s, logits = _timed(lambda: forward(_ids(APPEND_TOKENS, vocab, 3)))

    def decode(logits: torch.Tensor, steps: int) -> torch.Tensor:
        for _ in range(steps):
            logits = forward([int(logits.argmax())])
        return logits

    first_s, logits = _timed(lambda: decode(logits, 1))
    decode_s, _ = _timed(lambda: decode(logits, decode_tokens))
    matrices = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weight_bytes, stream = weight_stream(matrices, torch.bfloat16)
    return {
        "dtype": "bfloat16",
        "int8": False,
        "compiled": False,
        "load_s": load_s,
        "prefill_s": prefill_s,
        "append_s": append_s,
        "first_decode_call_s": first_s,
        "decode_tokens_per_s": decode_tokens / decode_s,
        "weight_bytes": weight_bytes,
        "floor_s": _floor(stream),
    }


def _floor(stream: Callable[[], None]) -> float:
    stream()
    return statistics.median(_timed(stream)[0] for _ in range(FLOOR_PASSES))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_size_cpu", description=__doc__)
    parser.add_argument("variant", choices=tuple(VARIANTS))
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--decode-tokens", type=int, default=16)
    parser.add_argument("--cache-dir", type=Path, required=True, help="kept int8 weights and compiled steps")
    args = parser.parse_args(argv)
    engine, settings = VARIANTS[args.variant]
    if engine == "transformers":
        result = measure_transformers(args.model, args.threads, args.decode_tokens)
    else:
        result = measure_sqlscout(args.model, args.threads, args.decode_tokens, args.cache_dir, settings)
    result |= {
        "variant": args.variant,
        "threads": args.threads,
        "decode_tokens": args.decode_tokens,
        "peak_rss_gb": _peak_rss_kb() / 1e6,
    }
    print(json.dumps(result))


def _peak_rss_kb() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, kilobytes on Linux


if __name__ == "__main__":
    main()

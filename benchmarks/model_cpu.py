"""CPU benchmark: our engine against transformers `generate` on one random mid-size Qwen3.5 model.

`python -m benchmarks.model_cpu [--prompt-tokens N] [--new-tokens N] [--repeats N] [--no-record]` prints
prefill time and decode tokens/s of both, and their ratio, then records them in benchmarks/RESULTS.md
under "Model engine (CPU)".
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.model_results import record_section
from model.engine import Engine
from model.sampling_params import SamplingParams

# A mid-size Qwen3.5: the 2B model's layer mix and proportions, scaled down to fit a 2-core CPU run.
MID_SIZE_CONFIG = dict(
    vocab_size=32768,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    full_attention_interval=4,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
)
SECTION = "Model engine (CPU)"


def _write_checkpoint(directory: Path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    reference = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**MID_SIZE_CONFIG)).eval()
    reference.save_pretrained(directory)
    # Token ids are fed directly; the engine only needs some tokenizer.json to open the directory.
    Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    return reference


def _median_time(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(prompt_tokens: int = 256, new_tokens: int = 64, repeats: int = 3, threads: int = 1) -> dict:
    """Measure both engines on the same model and prompt with `threads` torch threads; returns the numbers."""
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        reference = _write_checkpoint(Path(tmp))
        engine = Engine.load(
            tmp, device="cpu", dtype=torch.float32, max_context=prompt_tokens + new_tokens + 8
        )
    prompt = torch.randint(
        0, MID_SIZE_CONFIG["vocab_size"], (1, prompt_tokens), generator=torch.Generator().manual_seed(1)
    )
    greedy = SamplingParams(temperature=0)

    def ours_run(count: int) -> tuple[float, float, list[int]]:
        session = engine.new_session(max_tokens=prompt_tokens + count)
        started = time.perf_counter()
        session.append(prompt[0].tolist())
        prefilled = time.perf_counter()
        tokens = session.generate(count, greedy, stop_ids=set())[0]
        return prefilled - started, time.perf_counter() - prefilled, tokens

    def theirs_generate(count: int):
        with torch.inference_mode():
            return reference.generate(prompt, max_new_tokens=count, min_new_tokens=count, do_sample=False)[0]

    ours_run(4)
    theirs_generate(4)
    ours_runs = [ours_run(new_tokens) for _ in range(repeats)]
    ours_prefill_s = statistics.median(measured[0] for measured in ours_runs)
    # The first token comes from the prompt's forward pass; decode speed counts the steps after it.
    ours_decode = (new_tokens - 1) / statistics.median(measured[1] for measured in ours_runs)
    theirs_prefill_s = _median_time(lambda: theirs_generate(1), repeats)
    theirs_total_s = _median_time(lambda: theirs_generate(new_tokens), repeats)
    theirs_decode = (new_tokens - 1) / (theirs_total_s - theirs_prefill_s)
    same_tokens = ours_runs[0][2] == theirs_generate(new_tokens)[prompt_tokens:].tolist()
    return {
        "config": f"hidden {MID_SIZE_CONFIG['hidden_size']}, {MID_SIZE_CONFIG['num_hidden_layers']} layers "
        f"(6 Gated DeltaNet + 2 attention), vocab {MID_SIZE_CONFIG['vocab_size']}, fp32",
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "threads": torch.get_num_threads(),
        "ours_prefill_ms": ours_prefill_s * 1000,
        "transformers_prefill_ms": theirs_prefill_s * 1000,
        "ours_decode_tokens_per_s": ours_decode,
        "transformers_decode_tokens_per_s": theirs_decode,
        "decode_ratio": ours_decode / theirs_decode,
        "prefill_ratio": theirs_prefill_s / ours_prefill_s,
        "same_greedy_tokens": same_tokens,
    }


def report(result: dict) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {result['threads']} threads"
    return "\n".join(
        [
            f"Machine: {machine}; date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}.",
            f"Random Qwen3.5 model: {result['config']}; prompt {result['prompt_tokens']} tokens, "
            f"{result['new_tokens']} greedy new tokens, median of the repeats.",
            "",
            "| engine | prefill ms | decode tokens/s |",
            "|---|--:|--:|",
            f"| sqlscout model engine | {result['ours_prefill_ms']:.1f} | {result['ours_decode_tokens_per_s']:.1f} |",
            f"| transformers generate | {result['transformers_prefill_ms']:.1f} | "
            f"{result['transformers_decode_tokens_per_s']:.1f} |",
            f"| speed ratio (ours / transformers) | {result['prefill_ratio']:.2f}x | "
            f"{result['decode_ratio']:.2f}x (target >= 3x) |",
            "",
            f"Greedy tokens identical to transformers: {'yes' if result['same_greedy_tokens'] else 'NO'}.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_cpu", description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads for both engines (cores are shared)"
    )
    parser.add_argument("--no-record", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    text = report(run(args.prompt_tokens, args.new_tokens, args.repeats, args.threads))
    if not args.no_record:
        record_section(SECTION, text)
    print(text)


if __name__ == "__main__":
    main()

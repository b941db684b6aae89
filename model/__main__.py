"""Command line: complete one prompt with a Qwen3.5 model directory (`python -m model --help`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import configargparse
import torch

from model.engine_options import (
    CPU_ISA_HELP,
    CPU_ISAS,
    DEVICES,
    DTYPES,
    MAX_DRAFT_TOKENS,
    QUANTIZATIONS,
    SPECULATION,
    EngineOptions,
)
from model.sampling_params import SamplingParams


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m model", description=__doc__)
    parser.add_argument("--model", env_var="SQLSCOUT_MODEL", help="model directory")
    parser.add_argument("--prompt", env_var="SQLSCOUT_PROMPT", help="prompt text, used as is")
    parser.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=False,
        env_var="SQLSCOUT_CHAT",
        help="wrap the prompt as a user message with the chat template",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=128,
        env_var="SQLSCOUT_MAX_NEW_TOKENS",
        help="tokens to generate at most",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=SamplingParams.temperature,
        env_var="SQLSCOUT_TEMPERATURE",
        help="0 is greedy",
    )
    parser.add_argument(
        "--top-p",
        type=float,
        default=SamplingParams.top_p,
        env_var="SQLSCOUT_TOP_P",
        help="nucleus sampling threshold",
    )
    parser.add_argument(
        "--top-k", type=int, default=SamplingParams.top_k, env_var="SQLSCOUT_TOP_K", help="0 switches it off"
    )
    parser.add_argument("--seed", type=int, env_var="SQLSCOUT_SEED", help="sampling seed")
    parser.add_argument(
        "--device", choices=DEVICES, env_var="SQLSCOUT_DEVICE", help="default: cuda when available"
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        env_var="SQLSCOUT_DTYPE",
        help="default: bfloat16 on cuda and on a CPU with native bf16 (avx512_bf16, AMX, Arm BF16), else float32",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        env_var="SQLSCOUT_QUANTIZE",
        help="int8: projections and LM head as int8 weights with a scale per 32 values; int4: projections as "
        "4-bit weights with a scale and minimum per 32 values, the LM head and some matrices at 6 bits (CPU only)",
    )
    parser.add_argument(
        "--threads", type=int, env_var="SQLSCOUT_THREADS", help="CPU threads (default: one per physical core)"
    )
    parser.add_argument("--cpu-isa", choices=CPU_ISAS, env_var="SQLSCOUT_CPU_ISA", help=CPU_ISA_HELP)
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        env_var="SQLSCOUT_COMPILE",
        help="compile the CPU decode step with torch.compile (minutes, once per sampling mode and process)",
    )
    parser.add_argument(
        "--max-context",
        type=int,
        default=EngineOptions.max_context,
        env_var="SQLSCOUT_MAX_CONTEXT",
        help="tokens the caches hold",
    )
    parser.add_argument(
        "--speculate",
        choices=SPECULATION,
        default=EngineOptions.speculate,
        env_var="SQLSCOUT_SPECULATE",
        help="ngram: draft tokens from the context and verify them in one pass (exact: the same tokens); "
        "mtp: draft with the checkpoint's multi-token-prediction head; "
        "auto: ngram unless decode steps are captured as CUDA graphs or compiled (--compile)",
    )
    parser.add_argument(
        "--speculate-tokens",
        type=int,
        default=EngineOptions.speculate_tokens,
        env_var="SQLSCOUT_SPECULATE_TOKENS",
        help=f"the longest draft a verify pass checks (1 to {MAX_DRAFT_TOKENS})",
    )
    parser.add_argument(
        "--draft-head",
        env_var="SQLSCOUT_DRAFT_HEAD",
        help="with --speculate mtp: a checkpoint directory whose mtp.* tensors draft (default: the model's own; "
        "the base Qwen3.5-2B carries them, a model saved through transformers lacks them)",
    )
    parser.add_argument(
        "--json",
        action=argparse.BooleanOptionalAction,
        default=False,
        env_var="SQLSCOUT_JSON",
        help="print ids, text and timings as JSON",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.model or args.prompt is None:
        parser.error("--model and --prompt are required (or SQLSCOUT_MODEL and SQLSCOUT_PROMPT)")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    from model.errors import ModelDirectoryError, OptionError

    try:
        sampling = SamplingParams(
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed
        )
        options = EngineOptions(
            device=args.device,
            dtype=args.dtype,
            quantize=args.quantize,
            threads=args.threads,
            cpu_isa=args.cpu_isa,
            compile=args.compile,
            max_context=args.max_context,
            speculate=args.speculate,
            speculate_tokens=args.speculate_tokens,
            draft_head=Path(args.draft_head).expanduser() if args.draft_head else None,
        )
        from model.engine import Engine  # reads SQLSCOUT_KERNELS, which may be invalid

        engine = Engine.load(args.model, options)
    except OptionError as error:
        print(f"error: {error.flag_message}", file=sys.stderr)
        return 1
    except (ModelDirectoryError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    tokenizer = engine.tokenizer
    text = tokenizer.render_chat([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
    prompt_ids = tokenizer.encode(text)
    if not prompt_ids:
        print("error: the prompt encodes to no tokens", file=sys.stderr)
        return 1
    stop_ids = {tokenizer.token_id(t) for t in ("<|im_end|>", "<|endoftext|>") if _has(tokenizer, t)}
    session = engine.new_session(max_tokens=min(args.max_context, len(prompt_ids) + args.max_new_tokens))
    started = time.perf_counter()
    session.append(prompt_ids)
    _synchronize(engine.device)
    prefilled = time.perf_counter()
    completion = session.generate(args.max_new_tokens, sampling, stop_ids)[0]
    _synchronize(engine.device)
    finished = time.perf_counter()
    completion_text = tokenizer.decode(completion)
    if args.json:
        decode_s = finished - prefilled
        print(
            json.dumps(
                {
                    "prompt_ids": prompt_ids,
                    "completion_ids": completion,
                    "text": completion_text,
                    "prefill_ms": round((prefilled - started) * 1000, 3),
                    "decode_tokens_per_s": round(len(completion) / decode_s, 2) if decode_s > 0 else None,
                    "speculation": session.speculation.as_dict() if engine.drafter is not None else None,
                },
                ensure_ascii=False,
            )
        )
    else:
        print(completion_text)
    return 0


def _has(tokenizer, token: str) -> bool:
    try:
        tokenizer.token_id(token)
    except KeyError:
        return False
    return True


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    sys.exit(main())

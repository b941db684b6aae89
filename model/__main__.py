"""Command line: complete one prompt with a Qwen3.5 model directory (`python -m model --help`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
DEVICES = ("cpu", "cuda")


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"SQLSCOUT_{name}", default)


# Defaults from the environment stay strings: argparse converts them with the flag's type, so a bad value
# is reported like a bad flag instead of raising.
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m model", description=__doc__)
    parser.add_argument("--model", default=_env("MODEL"), help="model directory (env SQLSCOUT_MODEL)")
    parser.add_argument(
        "--prompt", default=_env("PROMPT"), help="prompt text, used as is (env SQLSCOUT_PROMPT)"
    )
    parser.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=_env("CHAT", "0") == "1",
        help="wrap the prompt as a user message with the chat template (env SQLSCOUT_CHAT=1)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=_env("MAX_NEW_TOKENS", "128"),
        help="tokens to generate at most (env SQLSCOUT_MAX_NEW_TOKENS)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=_env("TEMPERATURE", "0.6"),
        help="0 is greedy (env SQLSCOUT_TEMPERATURE)",
    )
    parser.add_argument("--top-p", type=float, default=_env("TOP_P", "0.95"), help="env SQLSCOUT_TOP_P")
    parser.add_argument(
        "--top-k", type=int, default=_env("TOP_K", "20"), help="0 switches it off (env SQLSCOUT_TOP_K)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=_env("SEED"),
        help="sampling seed (env SQLSCOUT_SEED)",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default=_env("DEVICE"),
        help="default: cuda when available (env SQLSCOUT_DEVICE)",
    )
    parser.add_argument(
        "--dtype",
        choices=tuple(DTYPES),
        default=_env("DTYPE"),
        help="default: bfloat16 on cuda, float32 on cpu (env SQLSCOUT_DTYPE)",
    )
    parser.add_argument(
        "--max-context",
        type=int,
        default=_env("MAX_CONTEXT", "32768"),
        help="tokens the caches hold (env SQLSCOUT_MAX_CONTEXT)",
    )
    parser.add_argument(
        "--json",
        action=argparse.BooleanOptionalAction,
        default=_env("JSON", "0") == "1",
        help="print ids, text and timings as JSON (env SQLSCOUT_JSON=1)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # argparse checks the choices of a flag, not of a default taken from the environment.
    for name, choices in (("device", DEVICES), ("dtype", tuple(DTYPES))):
        value = getattr(args, name)
        if value is not None and value not in choices:
            parser.error(f"SQLSCOUT_{name.upper()} must be one of {', '.join(choices)}, not {value!r}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if not args.model or args.prompt is None:
        print(
            "error: --model and --prompt are required (or SQLSCOUT_MODEL and SQLSCOUT_PROMPT)",
            file=sys.stderr,
        )
        return 2
    from model.errors import ModelDirectoryError
    from model.sampling_params import SamplingParams

    try:
        from model.engine import Engine  # reads SQLSCOUT_KERNELS, which may be invalid

        engine = Engine.load(
            args.model, device=args.device, dtype=DTYPES.get(args.dtype), max_context=args.max_context
        )
        sampling = SamplingParams(
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed
        )
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

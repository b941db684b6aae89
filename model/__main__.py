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

from model.engine_options import EngineOptions
from model.options import ENGINE_OPTIONS, SAMPLING_OPTIONS, add_options, given
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
    parser.add_argument("--seed", type=int, env_var="SQLSCOUT_SEED", help="sampling seed")
    parser.add_argument(
        "--max-context",
        type=int,
        default=EngineOptions.max_context,
        env_var="SQLSCOUT_MAX_CONTEXT",
        help="tokens the caches hold",
    )
    parser.add_argument(
        "--json",
        action=argparse.BooleanOptionalAction,
        default=False,
        env_var="SQLSCOUT_JSON",
        help="print ids, text and timings as JSON",
    )
    add_options(parser, ENGINE_OPTIONS, "the engine (flag, or environment variable)")
    add_options(parser, SAMPLING_OPTIONS, "sampling (flag, or environment variable)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.model or args.prompt is None:
        parser.error("--model and --prompt are required (or SQLSCOUT_MODEL and SQLSCOUT_PROMPT)")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    from model.errors import ModelDirectoryError, OptionError

    try:
        sampling = SamplingParams(**given(args, SAMPLING_OPTIONS), seed=args.seed)
        engine_options = given(args, ENGINE_OPTIONS)
        if "draft_head" in engine_options:
            engine_options["draft_head"] = Path(engine_options["draft_head"]).expanduser()
        options = EngineOptions(**engine_options, max_context=args.max_context)
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

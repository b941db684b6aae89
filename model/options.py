"""The local engine's and the sampler's user-facing options, declared once: each a flag and a `SQLSCOUT_*` variable,
read by the server's settings (mcp_server/settings.py), `python -m model` and the benchmarks alike."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import configargparse

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

ENV_PREFIX = "SQLSCOUT_"


@dataclass(frozen=True)
class Option:
    """One user-facing option: its flag, environment variable, parser and help text."""

    field: str
    help: str
    parse: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None
    secret: bool = False
    metavar: str | None = None
    switch: bool = False  # on or off: --flag / --no-flag, the variable 1/0, true/false or yes/no

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()


# The engine's options, each named as its EngineOptions field.
ENGINE_OPTIONS: tuple[Option, ...] = (
    Option("device", "device for a local model: cpu or cuda (default: cuda when available)", choices=DEVICES),
    Option(
        "dtype",
        "a local model's dtype (default: bfloat16 on a GPU and on a CPU with native bf16, else float32)",
        choices=DTYPES,
    ),
    Option(
        "quantize",
        "int8 or int4: a local model's weights quantized, a half or about a third of bf16's bytes to read per "
        "token on a CPU (CPU only; int4 keeps the LM head and some matrices at 6 bits, as llama.cpp's Q4_K_M)",
        choices=QUANTIZATIONS,
    ),
    Option(
        "threads", "CPU threads of a local model (default: one per physical core)", parse=int, metavar="N"
    ),
    Option("cpu_isa", CPU_ISA_HELP, choices=CPU_ISAS),
    Option(
        "compile",
        "compile a local model's CPU decode step with torch.compile while the model loads (minutes once, kept "
        "in the cache directory): the step's per-operation overhead goes, the C++ products stay",
        switch=True,
    ),
    Option(
        "speculate",
        "ngram: a local model drafts tokens from the context (table names, the last SQL, the call syntax) and "
        "checks them in one pass, emitting exactly the tokens it would emit without; mtp: drafts with the "
        "checkpoint's multi-token-prediction head (see --draft-head); off; auto (default): ngram unless decode "
        "steps are captured as CUDA graphs or compiled (--compile)",
        choices=SPECULATION,
    ),
    Option(
        "draft_head",
        "with --speculate mtp: a checkpoint directory whose mtp.* tensors draft (default: the model's own; the "
        "base Qwen3.5-2B carries them, a model saved through transformers lacks them)",
        metavar="DIR",
    ),
    Option(
        "speculate_tokens",
        f"the longest draft one verify pass checks, 1 to {MAX_DRAFT_TOKENS} (default "
        f"{EngineOptions.speculate_tokens})",
        parse=int,
        metavar="K",
    ),
)
# The sampler's options, each named as its SamplingParams field.
SAMPLING_OPTIONS: tuple[Option, ...] = (
    Option(
        "temperature",
        f"sampling temperature (default {SamplingParams.temperature:g}, as trained; 0 is greedy)",
        parse=float,
        metavar="T",
    ),
    Option(
        "top_p",
        f"nucleus sampling threshold (default {SamplingParams.top_p:g}, as trained)",
        parse=float,
        metavar="P",
    ),
    Option(
        "top_k",
        f"sample among the K likeliest tokens (default {SamplingParams.top_k}, as trained; 0 switches off)",
        parse=int,
        metavar="K",
    ),
)


def add_options(parser: configargparse.ArgumentParser, options: Iterable[Option], title: str) -> None:
    """Each option as a flag and its variable, in a group of the parser; unset ones parse to None, so that the
    dataclass they fill keeps its own defaults."""
    group = parser.add_argument_group(title)
    for option in options:
        kinds = (
            {"action": argparse.BooleanOptionalAction}
            if option.switch
            else {"type": option.parse, "choices": option.choices, "metavar": option.metavar}
        )
        group.add_argument(
            option.flag, dest=option.field, default=None, env_var=option.env, help=option.help, **kinds
        )


def pick(options: Iterable[Option], *fields: str) -> tuple[Option, ...]:
    """The named options, in the order named: for a command that takes only some of them."""
    by_field = {option.field: option for option in options}
    return tuple(by_field[field] for field in fields)


def given(namespace: argparse.Namespace, options: Iterable[Option]) -> dict[str, Any]:
    """The options set in a parsed namespace, by field name."""
    return {o.field: getattr(namespace, o.field) for o in options if getattr(namespace, o.field) is not None}

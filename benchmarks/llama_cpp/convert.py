"""Converts a Hugging Face Qwen3.5 checkpoint to GGUF with llama.cpp's own converter and quantizes it, once per
checkpoint version, into the cache directory."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.llama_cpp.build import VERSION, gguf_py, llama_cpp_source, llama_cpp_tools, run_tool
from dbtools.cache import cache_dir

log = logging.getLogger(__name__)

QUANTIZED = ("Q8_0", "Q4_K_M")
KINDS = ("BF16", *QUANTIZED)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
CONVERT_TIMEOUT_S = 3600


def checkpoint_key(model_dir: Path) -> str:
    """A short hash of what the GGUF files are made from: llama.cpp's version, config.json's bytes and the
    size and modification time of the weight and tokenizer files (hashing gigabytes of weights would take
    longer than a check should)."""
    digest = hashlib.sha256(VERSION.encode())
    digest.update((model_dir / "config.json").read_bytes())
    for path in sorted([*model_dir.glob("*.safetensors"), *(model_dir / name for name in TOKENIZER_FILES)]):
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def has_bpe_tokenizer(model_dir: Path) -> bool:
    """Whether the checkpoint's tokenizer.json is a BPE one, the only kind the converter reads for Qwen3.5."""
    path = model_dir / "tokenizer.json"
    return path.is_file() and json.loads(path.read_text()).get("model", {}).get("type") == "BPE"


def with_qwen_tokenizer(model_dir: Path, staging: Path) -> Path:
    """staging filled with links to model_dir's files and the real Qwen3.5 tokenizer in place of its own.

    Random benchmark checkpoints carry a dummy word-level tokenizer, which the converter refuses ("BPE
    pre-tokenizer was not recognized"); the checkpoint itself stays untouched."""
    from benchmarks.random_checkpoint import TOKENIZER_VOCAB_SIZE, write_tokenizer_files

    config = json.loads((model_dir / "config.json").read_text())
    vocab_size = config.get("text_config", config)["vocab_size"]
    if vocab_size < TOKENIZER_VOCAB_SIZE:
        raise ValueError(
            f"{model_dir} has no BPE tokenizer and a vocabulary of {vocab_size} tokens, too small for the real "
            f"Qwen3.5 tokenizer ({TOKENIZER_VOCAB_SIZE}): llama.cpp's converter cannot read it"
        )
    staging.mkdir()
    for path in model_dir.iterdir():
        if path.name not in TOKENIZER_FILES:
            (staging / path.name).symlink_to(path.resolve())
    write_tokenizer_files(staging)
    return staging


def _partial(target: Path) -> Path:
    """Where target is written first: an interrupted run leaves no file that looks complete."""
    return target.with_name(f".{target.name}.partial")


def _write(target: Path, what: str, command: list[str], env: dict[str, str] | None = None) -> None:
    """Run command, which writes _partial(target), then rename that file to target."""
    started = time.monotonic()
    run_tool(command, what, env=env, timeout_s=CONVERT_TIMEOUT_S)
    _partial(target).replace(target)
    log.warning("%s took %.0f s", what, time.monotonic() - started)


def _convert(tools: Path, model_dir: Path, target: Path) -> None:
    converter = llama_cpp_source(tools) / "convert_hf_to_gguf.py"
    env = {**os.environ, "PYTHONPATH": str(gguf_py(tools))}
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        # The converter names the model after its directory.
        staging = Path(scratch) / model_dir.name
        source = model_dir if has_bpe_tokenizer(model_dir) else with_qwen_tokenizer(model_dir, staging)
        # Without --no-mtp the converter asserts on checkpoints that have no mtp.* tensors.
        options = ["--no-mtp", "--outtype", "bf16", "--outfile", str(_partial(target))]
        _write(target, "converting to BF16", [sys.executable, str(converter), str(source), *options], env)


def gguf_files(model_dir: Path) -> dict[str, Path]:
    """{"BF16": ..., "Q8_0": ..., "Q4_K_M": ...}: the checkpoint as GGUF files, written on first use (a few
    minutes at the 2B size) and again whenever the checkpoint changes."""
    tools = llama_cpp_tools()
    key = checkpoint_key(model_dir)
    target = cache_dir() / f"{model_dir.name}-gguf-{key}"
    files = {kind: target / f"{kind}.gguf" for kind in KINDS}
    if all(path.is_file() for path in files.values()):
        return files
    # An older checkpoint's conversions are gigabytes that nothing will read again.
    for stale in cache_dir().glob(f"{model_dir.name}-gguf-*"):
        if stale != target:
            shutil.rmtree(stale)
    target.mkdir(exist_ok=True)
    log.warning("converting %s to GGUF (BF16, %s) in %s (once)", model_dir, ", ".join(QUANTIZED), target)
    if not files["BF16"].is_file():
        _convert(tools, model_dir, files["BF16"])
    for kind in QUANTIZED:
        if not files[kind].is_file():
            command = [str(tools / "llama-quantize"), str(files["BF16"]), str(_partial(files[kind])), kind]
            _write(files[kind], f"quantizing to {kind}", command)
    return files

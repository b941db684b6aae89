"""Int8 weights kept between runs: quantizing Qwen3.5-2B takes tens of seconds on a laptop CPU, reading them back
a few.

A cache file is named after the checkpoint's fingerprint (config.json, and each weight file's name, size,
modification time and tensor index), so a changed or re-downloaded checkpoint never meets stale weights; the
fingerprint reads file metadata only, not the gigabytes of weights.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from model.int8_weights import Int8Weight

log = logging.getLogger(__name__)

# Bump when the quantization's numbers change, so older cache files are not read.
SCHEME = "int8-per-row-bf16-scale-v1"
VALUES, SCALES = ".values", ".scales"


def cache_file(cache_dir: Path, model_dir: Path, weight_files: set[Path]) -> Path:
    """Where the int8 weights of the checkpoint in model_dir are kept under cache_dir."""
    digest = hashlib.sha256(SCHEME.encode())
    digest.update((model_dir / "config.json").read_bytes())
    for path in sorted(weight_files):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}:".encode())
        with open(path, "rb") as handle:  # a safetensors file starts with its index: names, shapes, offsets
            header_size = int.from_bytes(handle.read(8), "little")
            digest.update(handle.read(min(header_size, 100_000_000)))
    return cache_dir / f"{model_dir.name}-{digest.hexdigest()[:16]}.safetensors"


def read(path: Path, device: torch.device) -> dict[str, Int8Weight] | None:
    """The cached int8 weights by model tensor name, or None when there is no readable cache file."""
    if not path.is_file():
        return None
    try:
        with safe_open(path, framework="pt", device=str(device)) as handle:
            names = {key.removesuffix(VALUES) for key in handle.keys() if key.endswith(VALUES)}
            return {
                name: Int8Weight(handle.get_tensor(name + VALUES), handle.get_tensor(name + SCALES))
                for name in names
            }
    except (OSError, SafetensorError, KeyError) as error:  # a truncated or foreign file: quantize again
        log.warning("ignoring the unreadable int8 weights cache %s: %s", path, error)
        return None


def write(path: Path, weights: dict[str, Int8Weight]) -> None:
    """Keep weights at path, written whole or not at all; a failure only costs the next load its time."""
    tensors = {}
    for name, weight in weights.items():
        tensors[name + VALUES] = weight.values.contiguous()
        tensors[name + SCALES] = weight.scales.contiguous()
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(partial), metadata={"scheme": SCHEME})
        partial.replace(path)
        log.info("kept the int8 weights in %s for the next load", path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        log.warning("could not keep the int8 weights in %s: %s", path, error)

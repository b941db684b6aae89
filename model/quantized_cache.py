"""Quantized weights kept between runs: quantizing Qwen3.5-2B takes tens of seconds on a laptop CPU (int4 more),
reading them back a few.

A cache file is named after the quantization and the checkpoint's fingerprint (config.json, and each weight
file's name, size, modification time and tensor index), so a changed or re-downloaded checkpoint never meets
stale weights; the fingerprint reads file metadata only, not the gigabytes of weights.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from model.cpu_weights import CpuWeight

log = logging.getLogger(__name__)

# Bump when a quantization's numbers or layout change, so older cache files are not read.
SCHEMES = {
    "int8": "int8-fp16-scale-per-32-dot-blocks-v3",
    "int4": "int4-int6-mix-affine-8-bit-block-scales-per-512-chunk-rows-in-one-stream-v4",
}
PARTS = ("tiles", "scales")


def cache_file(cache_dir: Path, model_dir: Path, weight_files: set[Path], quantize: str) -> Path:
    """Where the quantized weights of the checkpoint in model_dir are kept under cache_dir."""
    digest = hashlib.sha256(SCHEMES[quantize].encode())
    digest.update((model_dir / "config.json").read_bytes())
    for path in sorted(weight_files):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}:".encode())
        with open(path, "rb") as handle:  # a safetensors file starts with its index: names, shapes, offsets
            header_size = int.from_bytes(handle.read(8), "little")
            digest.update(handle.read(min(header_size, 100_000_000)))
    return cache_dir / f"{model_dir.name}-{quantize}-{digest.hexdigest()[:16]}.safetensors"


def read(path: Path) -> dict[str, CpuWeight] | None:
    """The cached weights by model tensor name, or None when there is no readable cache file."""
    if not path.is_file():
        return None
    try:
        with safe_open(path, framework="pt") as handle:
            metadata = handle.metadata()
            weights = {}
            for name in {key.rsplit(".", 1)[0] for key in handle.keys()}:
                kind, rows, columns = metadata[name].split(":")
                parts = {
                    part: handle.get_tensor(f"{name}.{part}")
                    for part in PARTS
                    if f"{name}.{part}" in handle.keys()
                }
                weights[name] = CpuWeight(kind, shape=torch.Size((int(rows), int(columns))), **parts)
            return weights
    except (OSError, SafetensorError, KeyError, ValueError, TypeError) as error:
        log.warning("ignoring the unreadable quantized weights cache %s: %s", path, error)  # quantize again
        return None


def write(path: Path, weights: dict[str, CpuWeight]) -> None:
    """Keep weights at path, written whole or not at all; a failure only costs the next load its time."""
    tensors, metadata = {}, {}
    for name, weight in weights.items():
        for part in PARTS:
            tensor = getattr(weight, part)
            if tensor is not None:
                tensors[f"{name}.{part}"] = tensor.contiguous()
        metadata[name] = f"{weight.kind}:{weight.shape[0]}:{weight.shape[1]}"
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(partial), metadata=metadata)
        partial.replace(path)
        log.info("kept the quantized weights in %s for the next load", path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        log.warning("could not keep the quantized weights in %s: %s", path, error)

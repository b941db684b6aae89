"""Reads a Qwen3.5 safetensors checkpoint (single file or sharded) straight into device tensors."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from model import int8_cache
from model.config import Qwen35Config
from model.errors import DOWNLOAD_HINT, ModelDirectoryError
from model.int8_weights import Int8Weight, quantize_int8
from model.qwen35 import WeightLayout, weight_layout

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Checkpoints above this size report progress on stderr.
PROGRESS_BYTES = 256 * 1024 * 1024


def check_model_dir(model_dir: str | Path) -> Path:
    """Return model_dir as a Path, or raise ModelDirectoryError saying how to get a model."""
    path = Path(model_dir).expanduser()
    if path.is_file():
        raise ModelDirectoryError(f"{path} is a file: give the directory that holds it, {path.parent}")
    if not path.is_dir():
        raise ModelDirectoryError(
            f"model directory {path} does not exist. Download the model with: {DOWNLOAD_HINT.replace('DIR', str(path))}"
        )
    return path


def checkpoint_files(model_dir: Path) -> dict[str, Path]:
    """Map every tensor name of the checkpoint to the safetensors file that holds it."""
    index = model_dir / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ModelDirectoryError(f"{index} has no weight_map; the download may be incomplete")
        files = {name: model_dir / file for name, file in weight_map.items()}
        missing = sorted({str(f.name) for f in files.values() if not f.is_file()})
        if missing:
            raise ModelDirectoryError(
                f"{model_dir} lacks the shards {missing} named in {INDEX_FILE}; download the model again with: "
                f"{DOWNLOAD_HINT.replace('DIR', str(model_dir))}"
            )
        return files
    single = model_dir / SINGLE_FILE
    if not single.is_file():
        raise ModelDirectoryError(
            f"{model_dir} holds no weights ({SINGLE_FILE} or {INDEX_FILE}); download the model with: "
            f"{DOWNLOAD_HINT.replace('DIR', str(model_dir))}"
        )
    with safe_open(single, framework="pt") as handle:
        return {name: single for name in handle.keys()}


def load_weights(
    model_dir: Path,
    config: Qwen35Config,
    device: torch.device,
    dtype: torch.dtype,
    quantize: str | None = None,
    int8_cache_dir: Path | None = None,
) -> dict[str, torch.Tensor | Int8Weight]:
    """Load the language-model weights into tensors on device, fusing projections as weight_layout says.

    Each destination tensor is allocated once and each checkpoint tensor is copied into its slice, so no
    second full copy of the model is ever held. Vision and multi-token-prediction weights are skipped.
    quantize "int8" turns every projection and the LM head into an Int8Weight as soon as it is complete (so at
    most one of them is held in dtype at a time); norms, the embedding and the GDN constants stay as they are.
    With int8_cache_dir the int8 weights are read from there when this checkpoint's are, and kept there when not.
    """
    prefix = "model.language_model." if config.vision_language else "model."
    files = checkpoint_files(model_dir)
    layout = weight_layout(config)
    cache_path, cached = None, {}
    if quantize and int8_cache_dir is not None:
        cache_path = int8_cache.cache_file(int8_cache_dir, model_dir, set(files.values()))
        cached = int8_cache.read(cache_path, device) or {}
        if set(cached) != {name for name in [*layout, "lm_head.weight"] if is_quantized(name)}:
            cached = {}
    to_read = {name: part for name, part in layout.items() if name not in cached}
    weights = _read_checkpoint(model_dir, files, to_read, prefix, device, dtype, quantize)
    weights.update(cached)
    if "lm_head.weight" not in weights:
        head = weights["embed_tokens.weight"]
        weights["lm_head.weight"] = quantize_int8(head) if quantize else head
    if cache_path is not None and not cached:
        int8_cache.write(cache_path, {name: w for name, w in weights.items() if isinstance(w, Int8Weight)})
    if cached:
        log.info("loaded the %s weights from %s, the rest from %s", quantize, cache_path, model_dir)
    else:
        log.info("loaded the weights from %s%s", model_dir, f", {quantize} projections" if quantize else "")
    return weights


def _read_checkpoint(
    model_dir: Path,
    files: dict[str, Path],
    layout: dict[str, WeightLayout],
    prefix: str,
    device: torch.device,
    dtype: torch.dtype,
    quantize: str | None,
) -> dict[str, torch.Tensor | Int8Weight]:
    """The model tensors of layout read from the checkpoint's files (see load_weights)."""
    sources = {
        _checkpoint_name(source, prefix): source for part in layout.values() for source in part.sources
    }
    missing = sorted(name for name in sources if name not in files)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelDirectoryError(
            f"{model_dir}: the checkpoint lacks {shown}; is it a complete Qwen3.5 model?"
        )
    total_bytes = sum(f.stat().st_size for f in set(files.values()))
    weights = {
        name: torch.empty(part.shape, device=device, dtype=part.dtype or dtype)
        for name, part in layout.items()
    }
    by_file: dict[Path, list[str]] = {}
    for name in sources:
        by_file.setdefault(files[name], []).append(name)
    destinations = _destinations(layout, weights, prefix)
    # Sources still to be copied into each fused tensor, to quantize it the moment it is complete.
    pending = {name: len(part.sources) for name, part in layout.items()}
    with tqdm(
        total=len(sources), desc="loading weights", unit="tensor", disable=total_bytes < PROGRESS_BYTES
    ) as progress:
        for file, names in sorted(by_file.items()):
            with safe_open(file, framework="pt") as handle:
                for name in names:
                    # Popped, so no view keeps a quantized tensor's dense storage alive.
                    target, destination, expected = destinations.pop(name)
                    shape = tuple(handle.get_slice(name).get_shape())
                    if shape != expected:
                        raise ModelDirectoryError(
                            f"{model_dir}: tensor {name} has shape {list(shape)} but config.json implies "
                            f"{list(expected)}; config.json and the weights disagree"
                        )
                    destination.copy_(handle.get_tensor(name).view(destination.shape))
                    pending[target] -= 1
                    if quantize and pending[target] == 0 and is_quantized(target):
                        weights[target] = quantize_int8(weights[target])
                    progress.update(1)
    return weights


def is_quantized(name: str) -> bool:
    """Whether weight-only quantization covers the model tensor `name`: every projection and the LM head."""
    return name.endswith("proj.weight") or name == "lm_head.weight"


def _checkpoint_name(source: tuple[str, tuple[int, ...]], prefix: str) -> str:
    name = source[0]
    return name if name.startswith("lm_head.") else prefix + name


def _destinations(
    layout: dict[str, WeightLayout], weights: dict[str, torch.Tensor], prefix: str
) -> dict[str, tuple[str, torch.Tensor, tuple[int, ...]]]:
    """For each checkpoint tensor, its fused model tensor's name, its rows there and its expected shape."""
    destinations = {}
    for name, part in layout.items():
        row = 0
        for source in part.sources:
            shape = source[1]
            rows = shape[0]
            destinations[_checkpoint_name(source, prefix)] = (name, weights[name][row : row + rows], shape)
            row += rows
    return destinations

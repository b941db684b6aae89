"""Reads a Qwen3.5 safetensors checkpoint (single file or sharded) straight into device tensors."""

from __future__ import annotations

import json
import logging
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from model import quantized_cache
from model.config import Qwen35Config
from model.cpu_weights import matrix_kind, to_cpu_weight
from model.draft_head import PREFIX as DRAFT_PREFIX
from model.draft_head import draft_head_layout
from model.errors import DOWNLOAD_HINT, ModelDirectoryError
from model.huge_pages import into_huge_pages
from model.linear import Weight
from model.qwen35 import WeightLayout, weight_layout

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Checkpoints above this size report progress on stderr.
PROGRESS_BYTES = 256 * 1024 * 1024


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
    quantized_cache_dir: Path | None = None,
) -> dict[str, Weight]:
    """Load the language-model weights onto device, fusing projections as weight_layout says.

    Each destination tensor is allocated once and each checkpoint tensor is copied into its slice, so no
    second full copy of the model is ever held. Vision and multi-token-prediction weights are skipped.
    On a GPU every tensor is a plain one in dtype. On the CPU every projection and the LM head becomes a CpuWeight
    as soon as it is complete (so at most one is held twice at a time): in the checkpoint's own dtype, or int8 /
    int4 with quantize (int4: some matrices at 6 bits, see cpu_weights.matrix_kind); the
    embedding stays in the checkpoint's dtype, and a head tied to it is kept once, as the head, unless quantized.
    With quantized_cache_dir the quantized weights are read from there when this checkpoint's are, and kept
    there when not. On the CPU the matrices end in one block of memory advised for huge pages (huge_pages.py).
    """
    prefix = "model.language_model." if config.vision_language else "model."
    files = checkpoint_files(model_dir)
    layout = weight_layout(config)
    on_cpu = device.type == "cpu"
    cache_path, cached = None, {}
    if quantize and quantized_cache_dir is not None:
        cache_path = quantized_cache.cache_file(quantized_cache_dir, model_dir, set(files.values()), quantize)
        cached = quantized_cache.read(cache_path) or {}
        if set(cached) != {name for name in [*layout, "lm_head.weight"] if is_matrix(name)}:
            cached = {}
    to_read = {name: part for name, part in layout.items() if name not in cached}
    layers = config.num_hidden_layers
    weights = _read_checkpoint(
        model_dir, files, to_read, prefix, device, dtype, quantize if on_cpu else None, layers
    )
    weights.update(cached)
    if "lm_head.weight" not in weights:
        head = weights["embed_tokens.weight"]
        if on_cpu:
            kind = matrix_kind("lm_head.weight", head, quantize, layers, dtype)
            weights["lm_head.weight"] = to_cpu_weight(head, kind)
            if not quantize:  # kept once: the tied embedding reads the head's rows
                weights["embed_tokens.weight"] = weights["lm_head.weight"]
        else:
            weights["lm_head.weight"] = head
    if cache_path is not None and not cached:
        quantized_cache.write(cache_path, {name: w for name, w in weights.items() if is_matrix(name)})
    if on_cpu:
        weights = into_huge_pages(weights)
    if cached:
        log.info("loaded the %s weights from %s, the rest from %s", quantize, cache_path, model_dir)
    else:
        log.info("loaded the weights from %s%s", model_dir, f", {quantize} projections" if quantize else "")
    return weights


def check_draft_head(model_dir: Path) -> dict[str, Path]:
    """The checkpoint's files by tensor name; ModelDirectoryError when it has no multi-token-prediction head."""
    files = checkpoint_files(model_dir)
    if not any(name.startswith(DRAFT_PREFIX) for name in files):
        raise ModelDirectoryError(
            f"{model_dir}: the checkpoint has no multi-token-prediction head (no mtp.* tensors; a model saved "
            "through transformers drops them): give --draft-head DIR, a checkpoint that has one such as the base "
            "Qwen3.5-2B, or use --speculate ngram"
        )
    return files


def load_draft_head(
    model_dir: Path,
    config: Qwen35Config,
    device: torch.device,
    dtype: torch.dtype,
    quantize: str | None = None,
) -> dict[str, Weight]:
    """The multi-token-prediction head's tensors (`mtp.*`, see model.draft_head) of model_dir's checkpoint, laid
    out and stored as load_weights lays out the trunk's; ModelDirectoryError when the checkpoint has none."""
    files = check_draft_head(model_dir)
    layout = draft_head_layout(config)
    weights = _read_checkpoint(
        model_dir,
        files,
        layout,
        "",
        device,
        dtype,
        quantize if device.type == "cpu" else None,
        config.num_hidden_layers,
    )
    log.info("loaded the multi-token-prediction head from %s", model_dir)
    return weights


def _read_checkpoint(
    model_dir: Path,
    files: dict[str, Path],
    layout: dict[str, WeightLayout],
    prefix: str,
    device: torch.device,
    dtype: torch.dtype,
    quantize: str | None,
    layers: int,
) -> dict[str, Weight]:
    """The model tensors of layout read from the checkpoint's files (see load_weights); layers: the model's."""
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
    on_cpu = device.type == "cpu"
    stored = _stored_dtypes(files, layout, prefix) if on_cpu else {}
    weights = {
        name: torch.empty(part.shape, device=device, dtype=part.dtype or stored.get(name) or dtype)
        for name, part in layout.items()
    }
    by_file: dict[Path, list[str]] = {}
    for name in sources:
        by_file.setdefault(files[name], []).append(name)
    destinations = _destinations(layout, weights, prefix)
    # Sources still to be copied into each fused tensor, to convert it the moment it is complete.
    pending = {name: len(part.sources) for name, part in layout.items()}
    with tqdm(
        total=len(sources), desc="loading weights", unit="tensor", disable=total_bytes < PROGRESS_BYTES
    ) as progress:
        for file, names in sorted(by_file.items()):
            with safe_open(file, framework="pt") as handle:
                for name in names:
                    # Popped, so no view keeps a converted tensor's dense storage alive.
                    target, destination, expected = destinations.pop(name)
                    shape = tuple(handle.get_slice(name).get_shape())
                    if shape != expected:
                        raise ModelDirectoryError(
                            f"{model_dir}: tensor {name} has shape {list(shape)} but config.json implies "
                            f"{list(expected)}; config.json and the weights disagree"
                        )
                    destination.copy_(handle.get_tensor(name).view(destination.shape))
                    pending[target] -= 1
                    if on_cpu and pending[target] == 0 and is_matrix(target):
                        weight = weights[target]
                        weights[target] = to_cpu_weight(
                            weight, matrix_kind(target, weight, quantize, layers, dtype)
                        )
                    progress.update(1)
    return weights


def _stored_dtypes(
    files: dict[str, Path], layout: dict[str, WeightLayout], prefix: str
) -> dict[str, torch.dtype]:
    """The CPU keeps the matrices and the embedding as the checkpoint stores them: bf16 as bf16, else fp32."""
    names = [name for name in layout if is_matrix(name) or name == "embed_tokens.weight"]
    stored = {}
    with ExitStack() as stack:
        handles = {}
        for name in names:
            source = _checkpoint_name(layout[name].sources[0], prefix)
            file = files[source]
            if file not in handles:
                handles[file] = stack.enter_context(safe_open(file, framework="pt"))
            bf16 = handles[file].get_slice(source).get_dtype() == "BF16"
            stored[name] = torch.bfloat16 if bf16 else torch.float32
    return stored


def is_matrix(name: str) -> bool:
    """Whether the model tensor `name` is a matrix of the products (a CpuWeight on the CPU, quantized when asked):
    every projection and the LM head."""
    return name.endswith("proj.weight") or name == "lm_head.weight"


def _checkpoint_name(source: tuple[str, tuple[int, ...]], prefix: str) -> str:
    name = source[0]
    return name if name.startswith(("lm_head.", DRAFT_PREFIX)) else prefix + name


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

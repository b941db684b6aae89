"""The Qwen3.5 text-model settings read from a checkpoint's config.json (text-only or vision-language layout)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from model.errors import ModelDirectoryError
from model.model_dir import CONFIG_FILE

TEXT_MODEL_TYPE = "qwen3_5_text"
VISION_LANGUAGE_MODEL_TYPE = "qwen3_5"
LAYER_TYPES = ("linear_attention", "full_attention")


@dataclass(frozen=True, slots=True)
class Qwen35Config:
    """Shapes and constants of the Qwen3.5 language model."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    layer_types: tuple[str, ...]
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    vision_language: bool = False

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"config.json: {name} must be positive, got {getattr(self, name)}")
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"config.json: layer_types lists {len(self.layer_types)} layers, "
                f"num_hidden_layers is {self.num_hidden_layers}"
            )
        unknown = sorted(set(self.layer_types) - set(LAYER_TYPES))
        if unknown:
            raise ValueError(f"config.json: unsupported layer types {unknown}; expected {list(LAYER_TYPES)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"config.json: num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_key_value_heads {self.num_key_value_heads}"
            )
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(
                f"config.json: linear_num_value_heads {self.linear_num_value_heads} is not a "
                f"multiple of linear_num_key_heads {self.linear_num_key_heads}"
            )
        if not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % 2:
            raise ValueError(
                f"config.json: partial_rotary_factor {self.partial_rotary_factor} gives an "
                f"invalid rotary width for head_dim {self.head_dim}"
            )

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the GDN causal convolution: q, k and v side by side."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    @classmethod
    def from_dict(cls, raw: dict) -> Qwen35Config:
        """Build from a parsed config.json in either layout."""
        model_type = raw.get("model_type")
        vision_language = model_type == VISION_LANGUAGE_MODEL_TYPE
        if vision_language:
            text = raw.get("text_config")
            if not isinstance(text, dict):
                raise ValueError(
                    "config.json: a qwen3_5 (vision-language) config needs a text_config section"
                )
        elif model_type == TEXT_MODEL_TYPE:
            text = raw
        else:
            architectures = raw.get("architectures") or []
            raise ValueError(
                f"config.json: unsupported architecture (model_type {model_type!r}, architectures "
                f"{architectures}); this engine runs Qwen3.5 checkpoints (model_type "
                f"{VISION_LANGUAGE_MODEL_TYPE!r} or {TEXT_MODEL_TYPE!r})"
            )
        if text.get("attention_bias") or text.get("attn_output_gate") is False:
            raise ValueError(
                "config.json: attention biases and ungated attention are not Qwen3.5 features "
                "this engine supports"
            )
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", "mrope"):
            raise ValueError(f"config.json: unsupported rope_type {rope_type!r}")
        num_layers = _required(text, "num_hidden_layers")
        layer_types = text.get("layer_types")
        if layer_types is None:
            interval = text.get("full_attention_interval", 4)
            layer_types = [
                "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)
            ]
        # The vision-language layout keeps the tie flag at the top level; the text section may repeat it.
        tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        num_heads = _required(text, "num_attention_heads")
        return cls(
            vocab_size=_required(text, "vocab_size"),
            hidden_size=_required(text, "hidden_size"),
            intermediate_size=_required(text, "intermediate_size"),
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=text.get("num_key_value_heads", num_heads),
            head_dim=text.get("head_dim") or _required(text, "hidden_size") // num_heads,
            linear_num_key_heads=_required(text, "linear_num_key_heads"),
            linear_num_value_heads=_required(text, "linear_num_value_heads"),
            linear_key_head_dim=_required(text, "linear_key_head_dim"),
            linear_value_head_dim=_required(text, "linear_value_head_dim"),
            linear_conv_kernel_dim=text.get("linear_conv_kernel_dim", 4),
            layer_types=tuple(layer_types),
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 10000.0))),
            partial_rotary_factor=float(
                rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
            ),
            tie_word_embeddings=bool(tie),
            max_position_embeddings=text.get("max_position_embeddings", 32768),
            vision_language=vision_language,
        )

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> Qwen35Config:
        """Read and validate the config.json of a directory that check_model_dir accepted."""
        path = model_dir / CONFIG_FILE
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (ValueError, TypeError) as error:
            raise ModelDirectoryError(f"{path}: {error}") from error


def _required(section: dict, key: str) -> int:
    if key not in section:
        raise ValueError(f"config.json: missing {key!r}")
    return section[key]

"""Opening model directories: both config layouts, sharded files, and a clear error for each bad directory."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from model.config import Qwen35Config
from model.cpu_weights import CpuWeight
from model.engine import Engine
from model.engine_options import EngineOptions
from model.errors import ModelDirectoryError


def _copy(source, destination):
    shutil.copytree(source, destination)
    return destination


def test_both_layouts_parse_to_the_text_settings(checkpoint_dirs):
    text = Qwen35Config.from_model_dir(checkpoint_dirs["text_tied"])
    vision = Qwen35Config.from_model_dir(checkpoint_dirs["vl_untied_sharded"])
    assert not text.vision_language and text.tie_word_embeddings and text.hidden_size == 32
    assert vision.vision_language and not vision.tie_word_embeddings and vision.hidden_size == 48
    assert vision.layer_types[0] == "full_attention" and vision.rotary_dim == 4
    assert (checkpoint_dirs["vl_untied_sharded"] / "model.safetensors.index.json").is_file()


def test_tied_head_shares_the_embedding(engines):
    weights = engines["text_tied"].model.weights
    assert weights["lm_head.weight"] is weights["embed_tokens.weight"]
    untied = engines["vl_untied_sharded"].model.weights
    assert isinstance(untied["embed_tokens.weight"], torch.Tensor)
    assert untied["lm_head.weight"].tiles.data_ptr() != untied["embed_tokens.weight"].data_ptr()


def test_loads_in_bfloat16(checkpoint_dirs):
    engine = Engine.load(
        checkpoint_dirs["text_mqa"], EngineOptions(device="cpu", dtype="bfloat16", max_context=64)
    )
    projection = engine.model.weights["layers.0.mlp.gate_up_proj.weight"]
    assert isinstance(projection, CpuWeight) and projection.kind == "float32"  # the checkpoint stores fp32
    assert engine.model.weights["layers.1.linear_attn.A_log"].dtype == torch.float32
    session = engine.new_session()
    session.append([1, 2, 3])
    assert torch.isfinite(session.last_logits).all()


def test_missing_directory_says_how_to_download(tmp_path):
    with pytest.raises(ModelDirectoryError, match="hf download trl-lab/qwen3.5-2b-grpo-sqale --local-dir"):
        Engine.load(tmp_path / "nowhere", EngineOptions(device="cpu"))


def test_a_file_given_as_the_directory_names_its_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelDirectoryError, match="config.json is a file: give the directory that holds it"):
        Engine.load(tmp_path / "config.json", EngineOptions(device="cpu"))


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelDirectoryError, match="no config.json"):
        Engine.load(tmp_path, EngineOptions(device="cpu"))


def test_missing_weights(tmp_path, checkpoint_dirs):
    directory = _copy(checkpoint_dirs["text_mqa"], tmp_path / "m")
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelDirectoryError, match="holds no weights.*hf download"):
        Engine.load(directory, EngineOptions(device="cpu"))


def test_missing_shard(tmp_path, checkpoint_dirs):
    directory = _copy(checkpoint_dirs["vl_untied_sharded"], tmp_path / "m")
    shard = sorted(directory.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(ModelDirectoryError, match=shard.name):
        Engine.load(directory, EngineOptions(device="cpu"))


def test_missing_tokenizer(tmp_path, checkpoint_dirs):
    directory = _copy(checkpoint_dirs["text_mqa"], tmp_path / "m")
    (directory / "tokenizer.json").unlink()
    with pytest.raises(ModelDirectoryError, match="no tokenizer.json"):
        Engine.load(directory, EngineOptions(device="cpu"))


def test_unsupported_architecture(tmp_path, checkpoint_dirs):
    directory = _copy(checkpoint_dirs["text_mqa"], tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config.update(model_type="llama", architectures=["LlamaForCausalLM"])
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirectoryError, match="unsupported architecture.*LlamaForCausalLM"):
        Engine.load(directory, EngineOptions(device="cpu"))


def test_shape_disagreeing_with_config_names_the_tensor(tmp_path, checkpoint_dirs):
    directory = _copy(checkpoint_dirs["text_mqa"], tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config["intermediate_size"] += 8
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ModelDirectoryError, match=r"model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight has shape"
    ):
        Engine.load(directory, EngineOptions(device="cpu"))


def test_missing_tensor_is_named(tmp_path, checkpoint_dirs):
    directory = _copy(checkpoint_dirs["text_mqa"], tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config["tie_word_embeddings"] = True
    config["num_hidden_layers"] = 4
    config["layer_types"].append("linear_attention")
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirectoryError, match=r"lacks model\.layers\.3\."):
        Engine.load(directory, EngineOptions(device="cpu"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
        (
            {"layer_types": ["full_attention", "sliding_attention", "full_attention"]},
            "unsupported layer types",
        ),
        ({"num_hidden_layers": 2}, "layer_types lists 3 layers"),
        ({"hidden_size": 0}, "hidden_size must be positive"),
        ({"attention_bias": True}, "attention biases"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "unsupported rope_type"),
    ],
)
def test_invalid_configs_are_explained(checkpoint_dirs, change, message):
    raw = json.loads((checkpoint_dirs["text_mqa"] / "config.json").read_text())
    with pytest.raises(ValueError, match=message):
        Qwen35Config.from_dict({**raw, **change})

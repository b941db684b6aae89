"""Fixtures of the evaluation tests: a tokenizer-only model directory and a tiny random checkpoint."""

import pytest

from benchmarks.random_checkpoint import write_tiny_checkpoint, write_tokenizer_files


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A model directory holding only the Qwen3.5 tokenizer and chat template (what a replay needs)."""
    path = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer_files(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model"), seed=3)

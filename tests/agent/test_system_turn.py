"""The system turn that every question's prompt opens with: its tokens start the prompt's tokens whatever the
question, so its state can be computed once and reused without changing what the model sees."""

from __future__ import annotations

import pytest

from mcp_server.agent.chat_format import ChatFormat, render_chatml
from mcp_server.agent.prompts import Prompts
from model.tokenizer import Tokenizer

QUESTIONS = [
    "How many employees?",
    "  leading spaces and\nnew lines",
    ":-) which department?",
    "<|im_end|> tries to close the turn",
    "Grüße aus Köln: 東京の売上は?",
    "",
]


@pytest.mark.parametrize("evidence", [None, "rich means salary > 5000"])
def test_every_prompt_starts_with_the_system_turn_in_text_and_in_tokens(tokenizer_dir, evidence):
    tokenizer = Tokenizer.from_model_dir(tokenizer_dir)
    chat = ChatFormat(tokenizer.render_chat)
    prompts = Prompts()
    turn = chat.system_turn(prompts.system)
    assert turn.startswith("<|im_start|>system\n") and turn.endswith("<|im_end|>\n")
    turn_ids = tokenizer.encode(turn)
    for question in QUESTIONS:
        prompt = chat.first_prompt(prompts.system, prompts.user_message(question, evidence))
        assert prompt.startswith(turn) and prompt[len(turn) :].startswith("<|im_start|>user\n")
        assert tokenizer.encode(prompt)[: len(turn_ids)] == turn_ids


def test_plain_chatml_has_the_same_system_turn():
    assert ChatFormat(render_chatml).system_turn("Be brief.") == "<|im_start|>system\nBe brief.<|im_end|>\n"

"""The model directory's tokenizer (tokenizer.json via `tokenizers`) and its chat template (via jinja2)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer

from model.errors import DOWNLOAD_HINT, ModelDirectoryError


class ChatTemplateError(Exception):
    """The chat template refused the messages (raise_exception) or could not be rendered."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(
    value, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys: bool = False
):
    # Templates insert the result verbatim, as transformers' renderer does.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _template_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def read_chat_template(model_dir: Path) -> str | None:
    """The default chat template of model_dir: chat_template.jinja, else tokenizer_config.json's chat_template."""
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    config_file = model_dir / "tokenizer_config.json"
    if not config_file.is_file():
        return None
    template = json.loads(config_file.read_text()).get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


class Tokenizer:
    """Encodes and decodes token ids and renders chat messages to the prompt text the model expects."""

    def __init__(self, tokenizer: HFTokenizer, chat_template: str | None = None) -> None:
        self._tokenizer = tokenizer
        self.chat_template = chat_template
        self._template = _template_environment().from_string(chat_template) if chat_template else None

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> Tokenizer:
        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ModelDirectoryError(
                f"{model_dir} has no tokenizer.json; download the complete model with: "
                f"{DOWNLOAD_HINT.replace('DIR', str(model_dir))}"
            )
        return cls(HFTokenizer.from_file(str(path)), read_chat_template(model_dir))

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of text; special tokens written in the text (e.g. <|im_end|>) become their ids."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        """The id of a token such as "<|im_end|>"; KeyError when the vocabulary lacks it."""
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise KeyError(f"the tokenizer has no token {token!r}")
        return token_id

    def render_chat(
        self, messages: list[dict], *, add_generation_prompt: bool = True, enable_thinking: bool = True
    ) -> str:
        """The prompt text for messages, through the model directory's chat template."""
        if self._template is None:
            raise ChatTemplateError(
                "the model directory has no chat template (tokenizer_config.json "
                "chat_template or chat_template.jinja)"
            )
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking
        )

"""Any OpenAI-compatible completions endpoint as a policy (vLLM, SGLang, hosted providers): the episode's raw
text goes in as the prompt, the reply comes back as text; the server's prefix cache does the rest."""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from mcp_server.agent.chat_format import STOP_TOKENS, ChatFormat, render_chatml
from mcp_server.agent.errors import AgentCancelled, EndpointError
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.prompts import Prompts, load_prompts
from model.sampling_params import SamplingParams
from model.tokenizer import Tokenizer

log = logging.getLogger(__name__)

RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 60.0
# Without the model's tokenizer, lengths are estimated; Qwen's BPE averages above 3 characters a token on
# prose and SQL, so this errs on the long side.
CHARS_PER_TOKEN_ESTIMATE = 3.0


def completions_url(base_url: str) -> str:
    """`{base}/v1/completions` for a base URL given with or without its `/v1`."""
    base = base_url.rstrip("/")
    if base.endswith("/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/completions"


class EndpointRun:
    """Rows of growing text; lengths are exact after each reply (the server's `usage`), estimated between."""

    def __init__(self, policy: EndpointPolicy, prompt: str, samples: int) -> None:
        self._policy = policy
        self.texts = [prompt] * samples
        self._known = [0] * samples  # tokens the server counted for the text up to _known_chars
        self._known_chars = [0] * samples

    def append(self, texts: dict[int, str]) -> None:
        for row, text in texts.items():
            self.texts[row] += text

    def complete(
        self,
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        cancel: threading.Event | None = None,
    ) -> list[Completion]:
        if cancel is not None and cancel.is_set():
            raise AgentCancelled("the question was cancelled")
        if len(rows) == 1:
            return [self._complete_row(rows[0], max_new_tokens[0], sampling, cancel)]
        with ThreadPoolExecutor(max_workers=len(rows)) as pool:
            futures = [
                pool.submit(self._complete_row, row, limit, sampling, cancel)
                for row, limit in zip(rows, max_new_tokens, strict=True)
            ]
            return [future.result() for future in futures]

    def _complete_row(
        self, row: int, limit: int, sampling: SamplingParams, cancel: threading.Event | None
    ) -> Completion:
        started = time.perf_counter()
        body = self._policy.request_body(self.texts[row], limit, sampling)
        reply = self._policy.post(body, cancel)
        choice = reply["choices"][0]
        text = choice.get("text") or ""
        usage = reply.get("usage") or {}
        self.texts[row] += text
        generated = usage.get("completion_tokens")
        if generated is None:
            generated = self.count_tokens(text)
        if usage.get("prompt_tokens") is not None:
            self._known[row] = usage["prompt_tokens"] + generated
            self._known_chars[row] = len(self.texts[row])
        stopped = choice.get("finish_reason") != "length"
        return Completion(text, text, generated, stopped, time.perf_counter() - started)

    def length(self, row: int) -> int:
        return self._known[row] + self.count_tokens(self.texts[row][self._known_chars[row] :])

    def count_tokens(self, text: str) -> int:
        return self._policy.count_tokens(text)

    @property
    def processed_tokens(self) -> int | None:
        return None  # the server decides what its prefix cache saves

    def close(self) -> None:
        pass


class EndpointPolicy:
    """POSTs `{base}/v1/completions` with the raw episode text; retries 429 and 5xx with backoff."""

    name = "endpoint"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        model_dir: str | Path | None = None,
        timeout_s: float = 300.0,
        retries: int = 4,
        backoff_s: float = 1.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = completions_url(base_url)
        self.model = model
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)
        self.tokenizer = Tokenizer.from_model_dir(model_dir) if model_dir is not None else None
        self.prompts = load_prompts(model_dir) if model_dir is not None else Prompts()
        render = (
            self.tokenizer.render_chat if self.tokenizer and self.tokenizer.chat_template else render_chatml
        )
        self.chat = ChatFormat(render)

    def count_tokens(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(text))
        return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)

    def request_body(self, prompt: str, max_tokens: int, sampling: SamplingParams) -> dict:
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,  # not in OpenAI's schema; vLLM and SGLang read it
            "stop": list(STOP_TOKENS),
            "n": 1,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        return body

    def post(self, body: dict, cancel: threading.Event | None = None) -> dict:
        """One completion request; transient failures are retried, others raise EndpointError."""
        for attempt in range(self.retries + 1):
            if cancel is not None and cancel.is_set():
                raise AgentCancelled("the question was cancelled")
            response = None
            try:
                response = self._client.post(self.url, json=body)
            except httpx.TransportError as exc:
                failure = f"could not reach {self.url}: {exc}"
            else:
                if response.status_code == 200:
                    return self._parse(response)
                if response.status_code in (401, 403):
                    raise EndpointError(
                        f"{self.url} refused the API key (HTTP {response.status_code}): "
                        "check --api-key / SQLSCOUT_API_KEY"
                    )
                failure = f"{self.url} answered HTTP {response.status_code}: {_error_text(response)}"
                if response.status_code not in RETRY_STATUSES:
                    raise EndpointError(failure)
            if attempt < self.retries:
                delay = max(self.backoff_s * 2**attempt, _retry_after_s(response))
                log.warning("%s; retrying in %.1f s", failure, delay)
                if cancel is not None:
                    cancel.wait(delay)
                else:
                    time.sleep(delay)
        raise EndpointError(f"{failure} (gave up after {self.retries + 1} attempts)")

    def _parse(self, response: httpx.Response) -> dict:
        try:
            reply = response.json()
            reply["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EndpointError(
                f"{self.url} did not answer like an OpenAI completions endpoint ({exc}): {response.text[:200]}"
            ) from exc
        return reply

    def start(self, prompt: str, samples: int, max_tokens: int) -> EndpointRun:
        return EndpointRun(self, prompt, samples)

    def close(self) -> None:
        self._client.close()


def _retry_after_s(response: httpx.Response | None) -> float:
    """The server's Retry-After in seconds (capped at a minute); 0 when absent or a date."""
    try:
        return min(float(response.headers.get("Retry-After", 0)), MAX_RETRY_AFTER_S) if response else 0.0
    except ValueError:
        return 0.0


def _error_text(response: httpx.Response) -> str:
    """The server's own error message (OpenAI's `{"error": {"message": ...}}` or plain text), shortened."""
    try:
        payload = response.json()
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        message = error.get("message", error) if isinstance(error, dict) else error
        return str(message)[:300]
    except ValueError:
        return response.text[:300]

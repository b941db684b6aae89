"""Any OpenAI-compatible completions endpoint as a policy (vLLM, SGLang, hosted providers): the episode's raw
text goes in as the prompt, the reply comes back as text; the server's prefix cache does the rest."""

from __future__ import annotations

import logging
import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from dbtools.plural import counted
from mcp_server.agent.chat_format import STOP_TOKENS, ChatFormat, render_chatml
from mcp_server.agent.errors import EndpointError
from mcp_server.agent.policies.base import Completion
from mcp_server.agent.policies.cancellable_http import CancellableClient
from mcp_server.agent.prompts import Prompts, load_prompts
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent, Cancelled
from model.tokenizer import Tokenizer

log = logging.getLogger(__name__)

# Defaults: how long one completion may take (a long answer from a busy server), and how many times a
# failed request is tried again (backoff 1, 2, 4, 8 s: long enough for a server to restart).
ENDPOINT_TIMEOUT_S = 300.0
ENDPOINT_RETRIES = 4
RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
# How long the check at start-up waits for the server to list its models.
PROBE_TIMEOUT_S = 5.0
MAX_RETRY_AFTER_S = 60.0
# Without the model's tokenizer, lengths are estimated; Qwen's BPE averages above 3 characters a token on
# prose and SQL, so this errs on the long side.
CHARS_PER_TOKEN_ESTIMATE = 3.0
# What to do about each kind of failure, as the last clause of its message.
UNREACHABLE_HINT = (
    "check that the model server is running and that --endpoint (SQLSCOUT_ENDPOINT) is its address"
)
SERVER_LOG_HINT = "the model server's own log says more"
NOT_FOUND_HINT = (
    "check --endpoint-model (SQLSCOUT_ENDPOINT_MODEL) against the models the server lists at /v1/models, "
    "and that --endpoint (SQLSCOUT_ENDPOINT) is the server's base URL"
)
REFUSED_HINT = (
    "check that the server runs --endpoint-model (SQLSCOUT_ENDPOINT_MODEL) with room for --token-budget "
    "tokens (SQLSCOUT_TOKEN_BUDGET)"
)
NOT_A_COMPLETION_HINT = (
    "check that --endpoint (SQLSCOUT_ENDPOINT) is an OpenAI-compatible completions server such as vLLM or "
    "SGLang"
)


def completions_url(base_url: str) -> str:
    """`{base}/v1/completions` for a base URL given with or without its `/v1`."""
    base = base_url.rstrip("/")
    if base.endswith("/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/completions"


class TransientFailure(Exception):
    """A failed request that a later attempt may get through: the message says what failed, `hint` what to
    check if every attempt fails, `retry_after_s` how long the server asked to be left alone."""

    def __init__(self, message: str, hint: str, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.hint = hint
        self.retry_after_s = retry_after_s


class EndpointRun:
    """Rows of growing text; lengths are exact after each reply (the server's `usage`), estimated between.
    The run's requests share one client, whose connections a cancel cuts off."""

    def __init__(self, policy: EndpointPolicy, prompt: str, samples: int) -> None:
        self._policy = policy
        self._client = policy.client()
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
        cancel: CancelEvent | None = None,
    ) -> list[Completion]:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the question was cancelled")
        if len(rows) == 1:
            return [self._complete_row(rows[0], max_new_tokens[0], sampling, cancel)]
        with ThreadPoolExecutor(max_workers=len(rows)) as pool:
            futures = [
                pool.submit(self._complete_row, row, limit, sampling, cancel)
                for row, limit in zip(rows, max_new_tokens, strict=True)
            ]
            return [future.result() for future in futures]

    def _complete_row(
        self, row: int, limit: int, sampling: SamplingParams, cancel: CancelEvent | None
    ) -> Completion:
        started = time.perf_counter()
        body = self._policy.request_body(self.texts[row], limit, sampling)
        reply = self._policy.post(self._client, body, cancel)
        choice = reply["choices"][0]
        text = choice.get("text") or ""
        usage = reply.get("usage")
        usage = usage if isinstance(usage, dict) else {}
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
        self._client.close()


class EndpointPolicy:
    """POSTs `{base}/v1/completions` with the raw episode text; retries 429, 5xx and lost connections with
    backoff, waits `timeout_s` for a reply, and says in every failure what failed and what to check."""

    name = "endpoint"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        model_dir: str | Path | None = None,
        timeout_s: float = ENDPOINT_TIMEOUT_S,
        retries: int = ENDPOINT_RETRIES,
        backoff_s: float = 1.0,
    ) -> None:
        self.url = completions_url(base_url)
        self.model = model
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._has_key = bool(api_key)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Every question opens a client of its own; loading the CA certificates once saves each ~0.1 s of CPU.
        self._ssl_context = httpx.create_ssl_context()
        self.tokenizer = Tokenizer.from_model_dir(model_dir) if model_dir is not None else None
        self.prompts = load_prompts(model_dir) if model_dir is not None else Prompts()
        render = (
            self.tokenizer.render_chat if self.tokenizer and self.tokenizer.chat_template else render_chatml
        )
        self.chat = ChatFormat(render)

    def client(self) -> CancellableClient:
        """A client for one question's requests."""
        return CancellableClient(headers=self._headers, timeout_s=self.timeout_s, verify=self._ssl_context)

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

    def post(self, client: CancellableClient, body: dict, cancel: CancelEvent | None = None) -> dict:
        """One completion request; transient failures are retried with backoff, others raise EndpointError,
        and a cancel raises Cancelled, also in the middle of a request or a backoff."""
        for attempt in range(self.retries + 1):
            if cancel is not None and cancel.is_set():
                raise Cancelled("the question was cancelled")
            try:
                return self._attempt(client, body, cancel)
            except TransientFailure as failure:
                last = failure
            if attempt < self.retries:
                delay = max(self.backoff_s * 2**attempt, last.retry_after_s)
                # The final failure is reported in one line; the attempts before it are detail.
                log.debug("%s; retrying in %.1f s", last, delay)
                if cancel is not None:
                    cancel.wait(delay)
                else:
                    time.sleep(delay)
        raise EndpointError(f"{last} (gave up after {counted(self.retries + 1, 'attempt')}): {last.hint}")

    def _attempt(self, client: CancellableClient, body: dict, cancel: CancelEvent | None) -> dict:
        """One request: the reply, or EndpointError for a failure that a retry would repeat, or
        TransientFailure for one that it may not."""
        try:
            response = client.post(self.url, body, cancel)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise TransientFailure(
                f"could not reach the model endpoint {self.url}: {_reason(exc)}", UNREACHABLE_HINT
            ) from exc
        except httpx.TimeoutException as exc:
            # A server too slow for the timeout stays too slow for a retry, which would only add to its load.
            raise EndpointError(
                f"the model endpoint {self.url} did not answer within {self.timeout_s:g} s: raise "
                "--endpoint-timeout (SQLSCOUT_ENDPOINT_TIMEOUT) or lighten the server's load"
            ) from exc
        except httpx.UnsupportedProtocol as exc:
            raise EndpointError(
                f"the model endpoint {self.url} is not an http:// or https:// URL: {UNREACHABLE_HINT}"
            ) from exc
        except httpx.TransportError as exc:
            raise TransientFailure(
                f"the model endpoint {self.url} dropped the connection: {_reason(exc)}", SERVER_LOG_HINT
            ) from exc
        status = response.status_code
        if status == 200:
            return self._parse(response)
        if status in (401, 403):
            raise EndpointError(self._refused_key(status))
        failure = f"the model endpoint {self.url} answered HTTP {status}: {_error_text(response)}"
        if status in RETRY_STATUSES:
            raise TransientFailure(failure, SERVER_LOG_HINT, _retry_after_s(response))
        raise EndpointError(f"{failure}: {NOT_FOUND_HINT if status == 404 else REFUSED_HINT}")

    def _refused_key(self, status: int) -> str:
        if self._has_key:
            return (
                f"the model endpoint {self.url} refused the API key (HTTP {status}): "
                "check --api-key / SQLSCOUT_API_KEY"
            )
        return (
            f"the model endpoint {self.url} asks for an API key (HTTP {status}): "
            "give it with --api-key / SQLSCOUT_API_KEY"
        )

    def _parse(self, response: httpx.Response) -> dict:
        try:
            reply = response.json()
            text = reply["choices"][0].get("text")
        except ValueError:
            problem = "the reply is not JSON"
        except (KeyError, IndexError, TypeError, AttributeError):
            problem = "the reply has no choices[0]"
        else:
            if text is None or isinstance(text, str):
                return reply
            problem = "choices[0].text is not text"
        raise EndpointError(
            f"the model endpoint {self.url} did not answer with a completion ({problem}: "
            f"{response.text[:200]!r}): {NOT_A_COMPLETION_HINT}"
        )

    def start(self, prompt: str, samples: int, max_tokens: int) -> EndpointRun:
        return EndpointRun(self, prompt, samples)

    def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
        """The models the server lists at `{base}/v1/models`; None where it lists none (not every server has
        the route). Raises EndpointError when nothing answers at the address, so that a question fails at once
        with the reason instead of after its retries."""
        url = self.url.removesuffix("/completions") + "/models"
        try:
            response = httpx.get(url, headers=self._headers, timeout=timeout_s, verify=self._ssl_context)
        except httpx.TransportError as error:
            raise EndpointError(
                f"the model server at {url} does not answer ({_reason(error)}): {UNREACHABLE_HINT}"
            ) from None
        if response.status_code != 200:
            return None
        try:
            return [str(model["id"]) for model in response.json().get("data", [])]
        except (ValueError, AttributeError, KeyError, TypeError):
            return None

    def close(self) -> None:
        pass


def _reason(error: httpx.TransportError) -> str:
    """A transport error in words: "connection refused" rather than "[Errno 111] Connection refused"."""
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(error)).strip().rstrip(".") or type(error).__name__
    return text[:1].lower() + text[1:]


def _retry_after_s(response: httpx.Response) -> float:
    """The server's Retry-After in seconds (capped at a minute); 0 when absent or a date."""
    try:
        return min(float(response.headers.get("Retry-After", 0)), MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0


def _error_text(response: httpx.Response) -> str:
    """The server's own error message (OpenAI's `{"error": {"message": ...}}` or plain text), shortened."""
    try:
        payload = response.json()
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except ValueError:
        text = response.text
    return text.strip()[:300] or response.reason_phrase

"""Policies produce the model's completions: the local engine, an OpenAI-compatible endpoint, or a replay."""

from __future__ import annotations

from pathlib import Path

from mcp_server.agent.errors import PolicyConfigError
from mcp_server.agent.policies.base import Completion, Policy, PolicyRun
from mcp_server.agent.policies.endpoint import ENDPOINT_RETRIES, ENDPOINT_TIMEOUT_S, EndpointPolicy
from model.errors import DOWNLOAD_HINT, missing_local_engine
from model.sampling_params import SamplingParams

__all__ = ["Completion", "Policy", "PolicyRun", "build_policy"]

# Episode rows the local engine decodes together by default; each caches up to the token budget.
MAX_BATCH_ROWS = 8

MODEL_SETUP_HINT = (
    f"give a model directory (--model DIR / SQLSCOUT_MODEL; get one with `{DOWNLOAD_HINT}`) "
    "or an OpenAI-compatible endpoint "
    "serving that model (--endpoint URL --endpoint-model NAME / SQLSCOUT_ENDPOINT, SQLSCOUT_ENDPOINT_MODEL)"
)


def build_policy(
    *,
    model_dir: str | Path | None = None,
    endpoint: str | None = None,
    endpoint_model: str | None = None,
    api_key: str | None = None,
    endpoint_timeout_s: float = ENDPOINT_TIMEOUT_S,
    endpoint_retries: int = ENDPOINT_RETRIES,
    device: str | None = None,
    dtype: str | None = None,
    quantize: str | None = None,
    threads: int | None = None,
    cache_dir: Path | None = None,
    max_batch_rows: int = MAX_BATCH_ROWS,
    compile_sampling: SamplingParams | None = None,
) -> Policy:
    """The endpoint policy when an endpoint is given (a model directory then only lends its tokenizer and
    prompts; each request waits up to endpoint_timeout_s and a failed one is tried endpoint_retries more
    times), else the local engine on the model directory (device, dtype name, quantization, CPU threads and
    the directory that keeps int8 weights and compiled steps between runs, as Engine.load takes them), decoding
    up to max_batch_rows episode rows of all questions together; with compile_sampling its CPU decode step is
    compiled for that sampling while loading."""
    if model_dir is not None and not Path(model_dir).is_dir():
        raise PolicyConfigError(f"model directory {str(model_dir)!r} does not exist; {MODEL_SETUP_HINT}")
    if endpoint:
        if not endpoint_model:
            raise PolicyConfigError(
                "the endpoint needs the name of the model it serves (--endpoint-model / SQLSCOUT_ENDPOINT_MODEL)"
            )
        return EndpointPolicy(
            endpoint,
            endpoint_model,
            api_key=api_key,
            model_dir=model_dir,
            timeout_s=endpoint_timeout_s,
            retries=endpoint_retries,
        )
    if model_dir is not None:
        missing = missing_local_engine()
        if missing:
            raise PolicyConfigError(missing)
        from mcp_server.agent.policies.local import LocalPolicy

        return LocalPolicy.load(
            model_dir,
            device=device,
            dtype=dtype,
            quantize=quantize,
            threads=threads,
            cache_dir=cache_dir,
            max_batch_rows=max_batch_rows,
            compile_sampling=compile_sampling,
        )
    raise PolicyConfigError(f"no text-to-SQL model is configured: {MODEL_SETUP_HINT}")

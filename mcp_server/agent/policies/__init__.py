"""Policies produce the model's completions: the local engine, an OpenAI-compatible endpoint, or a replay."""

from __future__ import annotations

from pathlib import Path

from mcp_server.agent.errors import PolicyConfigError
from mcp_server.agent.policies.base import Completion, Policy, PolicyRun
from mcp_server.agent.policies.endpoint import ENDPOINT_RETRIES, ENDPOINT_TIMEOUT_S, EndpointPolicy
from model.engine_options import EngineOptions
from model.errors import DOWNLOAD_HINT, ModelDirectoryError, missing_local_engine
from model.model_dir import check_model_dir
from model.sampling_params import SamplingParams

__all__ = ["Completion", "Policy", "PolicyRun", "build_policy", "check_model_source"]

MODEL_SETUP_HINT = (
    f"give a model directory (--model DIR / SQLSCOUT_MODEL; get one with `{DOWNLOAD_HINT}`) "
    "or an OpenAI-compatible endpoint "
    "serving that model (--endpoint URL --endpoint-model NAME / SQLSCOUT_ENDPOINT, SQLSCOUT_ENDPOINT_MODEL)"
)


def check_model_source(
    model_dir: str | Path | None, endpoint: str | None, endpoint_model: str | None
) -> None:
    """Refuse, before anything loads, what would fail at the first question: a --model that is no model directory
    (with an endpoint it only lends its tokenizer and prompts, so it needs no config.json), an endpoint without the
    name of the model it serves, or a local engine this Python cannot run."""
    if model_dir is not None:
        try:
            check_model_dir(model_dir, needs_config=not endpoint)
        except ModelDirectoryError as error:
            raise PolicyConfigError(f"--model {error}") from None
    if endpoint and not endpoint_model:
        raise PolicyConfigError("--endpoint needs --endpoint-model NAME (SQLSCOUT_ENDPOINT_MODEL)")
    missing = None if endpoint or model_dir is None else missing_local_engine()
    if missing:
        raise PolicyConfigError(f"--model: {missing}; or run the model on a server and give --endpoint URL")


def build_policy(
    *,
    model_dir: str | Path | None = None,
    endpoint: str | None = None,
    endpoint_model: str | None = None,
    api_key: str | None = None,
    endpoint_timeout_s: float = ENDPOINT_TIMEOUT_S,
    endpoint_retries: int = ENDPOINT_RETRIES,
    engine_options: EngineOptions = EngineOptions(),
    sampling: SamplingParams = SamplingParams(),
) -> Policy:
    """The endpoint policy when an endpoint is given (a model directory then only lends its tokenizer and
    prompts; each request waits up to endpoint_timeout_s and a failed one is tried endpoint_retries more
    times), else the local engine on the model directory, run as engine_options say; with
    engine_options.compile its CPU decode step is compiled for the agent's `sampling` while loading."""
    check_model_source(model_dir, endpoint, endpoint_model)
    if endpoint:
        return EndpointPolicy(
            endpoint,
            endpoint_model,
            api_key=api_key,
            model_dir=model_dir,
            timeout_s=endpoint_timeout_s,
            retries=endpoint_retries,
        )
    if model_dir is not None:
        from mcp_server.agent.policies.local import LocalPolicy

        return LocalPolicy.load(model_dir, engine_options, sampling)
    raise PolicyConfigError(f"no text-to-SQL model is configured: {MODEL_SETUP_HINT}")

"""The server's settings: the options (each a flag and a `SQLSCOUT_*` variable) and one validated dataclass."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dbtools.connection_defaults import CONNECT_TIMEOUT_S, POOL_SIZE
from dbtools.query_limits import DEFAULT_QUERY_LIMITS
from mcp_server.agent.episode import EpisodeLimits
from mcp_server.agent.errors import PolicyConfigError
from mcp_server.agent.policies import check_model_source
from mcp_server.agent.policies.endpoint import ENDPOINT_RETRIES, ENDPOINT_TIMEOUT_S
from mcp_server.audit_log import KEPT_FILES as KEPT_AUDIT_FILES
from model.engine_options import (
    EngineOptions,
)
from model.errors import ModelDirectoryError, OptionError
from model.model_dir import check_model_dir
from model.options import ENGINE_OPTIONS, SAMPLING_OPTIONS, Option
from model.sampling_params import SamplingParams

TRANSPORTS = ("stdio", "http")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOOPBACK_NAMES = ("localhost",)
AUDIT_LOG_MAX_MB = 100.0
# An endpoint batches many requests; a few questions at once keep one team's assistants from queueing.
MAX_CONCURRENT_QUESTIONS = 8


class SettingsError(ValueError):
    """A setting is missing, malformed or inconsistent; the message says which and how to fix it."""


OPTIONS: tuple[Option, ...] = (
    Option(
        "dsn",
        "database: a SQLite or DuckDB file, CSV/Parquet/JSON files or a folder of them, sqlite:///path, "
        "duckdb:///path, postgresql://..., libpq 'host=... dbname=...' or mysql://user@host/db "
        "(default: the bundled demo database)",
        metavar="DSN",
    ),
    Option(
        "config",
        "TOML file of named sources ([sources.NAME]: dsn, password from ${VAR} or password_file, ssh tunnel, "
        "limits) and of any setting under [server]; flags and variables win over it (docs/configuration.md)",
        metavar="FILE",
    ),
    Option(
        "model",
        "directory of the text-to-SQL model (safetensors, tokenizer, config); with --endpoint it only lends "
        "its tokenizer, chat template and prompts",
        metavar="DIR",
    ),
    Option(
        "endpoint",
        "OpenAI-compatible completions endpoint to run the model on instead (e.g. vLLM)",
        metavar="URL",
    ),
    Option("endpoint_model", "model name to request from --endpoint", metavar="NAME"),
    Option("api_key", "API key sent to --endpoint", secret=True, metavar="KEY"),
    Option(
        "endpoint_timeout",
        f"seconds one completion from --endpoint may take (default {ENDPOINT_TIMEOUT_S:g})",
        parse=float,
        metavar="SECONDS",
    ),
    Option(
        "endpoint_retries",
        f"times a failed request to --endpoint is tried again, after 1, 2, 4... s (default {ENDPOINT_RETRIES})",
        parse=int,
        metavar="N",
    ),
    Option("transport", "stdio (default; for desktop hosts) or http (streamable HTTP)", choices=TRANSPORTS),
    Option(
        "host", "HTTP bind address (default 127.0.0.1; any other address requires --token)", metavar="ADDRESS"
    ),
    Option("port", "HTTP port (default 8000)", parse=int, metavar="PORT"),
    Option(
        "token",
        "bearer token HTTP clients must send as 'Authorization: Bearer TOKEN'",
        secret=True,
        metavar="TOKEN",
    ),
    Option(
        "allowed_origins",
        "extra comma-separated browser origins accepted over HTTP (loopback origins are always accepted)",
        metavar="ORIGINS",
    ),
    Option(
        "max_rows",
        f"most rows any query returns (default {DEFAULT_QUERY_LIMITS.max_rows})",
        parse=int,
        metavar="N",
    ),
    Option(
        "timeout",
        f"statement timeout in seconds (default {DEFAULT_QUERY_LIMITS.timeout_s:g})",
        parse=float,
        metavar="SECONDS",
    ),
    Option(
        "connect_timeout",
        "seconds a new PostgreSQL or MySQL connection may take before the server counts as unreachable "
        f"(default {CONNECT_TIMEOUT_S}, at least 2)",
        parse=int,
        metavar="SECONDS",
    ),
    Option(
        "pool_size",
        f"most PostgreSQL or MySQL connections open at once, so most queries running at once (default {POOL_SIZE})",
        parse=int,
        metavar="N",
    ),
    *ENGINE_OPTIONS,
    Option(
        "samples",
        "episodes per question; more than 1 votes on the result (default 1)",
        parse=int,
        metavar="N",
    ),
    Option(
        "token_budget",
        f"tokens per episode, prompt and replies together (default {EpisodeLimits.token_budget}, as trained)",
        parse=int,
        metavar="TOKENS",
    ),
    *SAMPLING_OPTIONS,
    Option(
        "max_concurrent_questions",
        "questions answered at once; later ones wait their turn in order of arrival "
        f"(default {MAX_CONCURRENT_QUESTIONS})",
        parse=int,
        metavar="N",
    ),
    Option(
        "max_batch_rows",
        "episodes of all questions that a local model decodes together, each caching up to --token-budget "
        f"tokens; questions needing more wait their turn (default {EngineOptions.max_batch_rows})",
        parse=int,
        metavar="N",
    ),
    Option("log_level", "stderr log level (default INFO)", parse=str.upper, choices=LOG_LEVELS),
    Option(
        "audit_log",
        "file to append one JSON line to per tool call: time, identity, source, tool, arguments, outcome, rows, "
        "duration (never a result row or a secret); a call whose line cannot be written is not answered",
        metavar="PATH",
    ),
    Option(
        "audit_log_max_mb",
        f"size at which the audit log is rotated, {KEPT_AUDIT_FILES} older files kept (default "
        f"{AUDIT_LOG_MAX_MB:g})",
        parse=float,
        metavar="MB",
    ),
)


def is_loopback(host: str) -> bool:
    """True for a host name or address that only this machine can reach."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    """Everything the server and the `ask` command need; validated on construction."""

    dsn: str | None = None
    config: str | None = None
    model: str | None = None
    endpoint: str | None = None
    endpoint_model: str | None = None
    api_key: str | None = None
    endpoint_timeout: float = ENDPOINT_TIMEOUT_S
    endpoint_retries: int = ENDPOINT_RETRIES
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    allowed_origins: str | None = None
    max_rows: int = DEFAULT_QUERY_LIMITS.max_rows
    timeout: float = DEFAULT_QUERY_LIMITS.timeout_s
    connect_timeout: int = CONNECT_TIMEOUT_S
    pool_size: int = POOL_SIZE
    device: str | None = None
    dtype: str | None = None
    quantize: str | None = None
    threads: int | None = None
    cpu_isa: str | None = None
    compile: bool = False
    speculate: str = EngineOptions.speculate
    speculate_tokens: int = EngineOptions.speculate_tokens
    draft_head: str | None = None
    samples: int = 1
    token_budget: int = EpisodeLimits.token_budget
    temperature: float = SamplingParams.temperature
    top_p: float = SamplingParams.top_p
    top_k: int = SamplingParams.top_k
    max_concurrent_questions: int = MAX_CONCURRENT_QUESTIONS
    max_batch_rows: int = EngineOptions.max_batch_rows
    log_level: str = "INFO"
    audit_log: str | None = None
    audit_log_max_mb: float = AUDIT_LOG_MAX_MB

    def __post_init__(self) -> None:
        for name in (
            "model",
            "config",
            "audit_log",
            "draft_head",
        ):  # `~` reaches us unexpanded from host configs and quoted variables
            if getattr(self, name):
                object.__setattr__(self, name, str(Path(getattr(self, name)).expanduser()))
        if self.transport not in TRANSPORTS:
            raise SettingsError(f"--transport must be one of {', '.join(TRANSPORTS)}, not {self.transport!r}")
        if self.endpoint:
            self._check_endpoint_url()
        try:
            check_model_source(self.model, self.endpoint, self.endpoint_model)
        except PolicyConfigError as error:
            raise SettingsError(str(error)) from None
        if self.model and self.speculate == "mtp" and not self.endpoint:
            self._check_draft_head()
        if (self.endpoint_model or self.api_key) and not self.endpoint:
            raise SettingsError("--endpoint-model and --api-key only apply with --endpoint URL")
        if not math.isfinite(self.endpoint_timeout) or self.endpoint_timeout <= 0:
            raise SettingsError(
                f"--endpoint-timeout must be a positive number of seconds, not {self.endpoint_timeout:g}"
            )
        if self.endpoint_retries < 0:
            raise SettingsError(f"--endpoint-retries must be at least 0, not {self.endpoint_retries}")
        if not 1 <= self.port <= 65535:
            raise SettingsError(f"--port must be between 1 and 65535, not {self.port}")
        if self.max_rows < 1:
            raise SettingsError(f"--max-rows must be at least 1, not {self.max_rows}")
        if not math.isfinite(self.timeout) or self.timeout <= 0:  # a NaN timeout would never expire
            raise SettingsError(f"--timeout must be a positive number of seconds, not {self.timeout:g}")
        if self.connect_timeout < 2:  # libpq waits at least 2 s whatever it is given
            raise SettingsError(f"--connect-timeout must be at least 2 seconds, not {self.connect_timeout}")
        if self.pool_size < 1:
            raise SettingsError(f"--pool-size must be at least 1, not {self.pool_size}")
        if self.samples < 1:
            raise SettingsError(f"--samples must be at least 1, not {self.samples}")
        if self.token_budget < 256:
            raise SettingsError(f"--token-budget must be at least 256 tokens, not {self.token_budget}")
        if self.max_concurrent_questions < 1:
            raise SettingsError(
                f"--max-concurrent-questions must be at least 1, not {self.max_concurrent_questions}"
            )
        try:  # the engine's and the sampling's own checks, named by their flags
            self.engine_options()
            self.sampling()
        except OptionError as error:
            raise SettingsError(error.flag_message) from None
        if not math.isfinite(self.audit_log_max_mb) or self.audit_log_max_mb <= 0:
            raise SettingsError(f"--audit-log-max-mb must be a positive size, not {self.audit_log_max_mb:g}")
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")

    def check_authentication(self, identities: int = 0) -> None:
        """Refuse to serve HTTP beyond this machine unless every client must show a token (--token, or one of
        the configuration file's `identities`)."""
        if self.transport == "http" and not is_loopback(self.host) and not (self.token or identities):
            raise SettingsError(
                f"--host {self.host} exposes the database beyond this machine: set --token TOKEN "
                "(SQLSCOUT_TOKEN) or identities in the configuration file so that clients must authenticate, "
                "or bind to 127.0.0.1"
            )

    def _check_endpoint_url(self) -> None:
        """An endpoint is an http(s) URL with a host: anything else would fail only at the first question."""
        parts = urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(
                f"--endpoint (SQLSCOUT_ENDPOINT) must be an http:// or https:// URL with a host, not "
                f"{self.endpoint!r}: for example http://127.0.0.1:8001/v1"
            )
        try:
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError:
            raise SettingsError(
                f"--endpoint (SQLSCOUT_ENDPOINT) has a port that is not a number: {self.endpoint!r}"
            ) from None
        # The URL is shown in logs, errors and list_sources; a key belongs where nothing shows it.
        if parts.username or parts.password:
            raise SettingsError(
                "--endpoint (SQLSCOUT_ENDPOINT) carries credentials (user:password@): give the key with --api-key "
                "(SQLSCOUT_API_KEY) instead"
            )

    def _check_draft_head(self) -> None:
        """With --speculate mtp, the checkpoint that drafts must carry the draft head's tensors."""
        from model.loader import check_draft_head  # the local engine's packages are there: checked before

        head = self.draft_head or self.model
        try:
            check_draft_head(check_model_dir(head))
        except ModelDirectoryError as error:
            raise SettingsError(
                f"--{'draft-head' if self.draft_head else 'speculate mtp'}: {error}"
            ) from None

    def engine_options(self, cache_dir: Path | None = None) -> EngineOptions:
        """The local engine's options; cache_dir keeps quantized weights and compiled steps between starts."""
        return EngineOptions(
            device=self.device,
            dtype=self.dtype,
            quantize=self.quantize,
            threads=self.threads,
            cpu_isa=self.cpu_isa,
            compile=self.compile,
            speculate=self.speculate,
            speculate_tokens=self.speculate_tokens,
            draft_head=Path(self.draft_head) if self.draft_head else None,
            max_batch_rows=self.max_batch_rows,
            cache_dir=cache_dir,
        )

    def sampling(self) -> SamplingParams:
        """The agent's sampling settings."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)

    @property
    def has_model(self) -> bool:
        return bool(self.model or self.endpoint)

    @property
    def origins(self) -> tuple[str, ...]:
        """The extra accepted origins, normalised (no trailing slash, lower case)."""
        return tuple(
            o.strip().rstrip("/").lower() for o in (self.allowed_origins or "").split(",") if o.strip()
        )

    def non_defaults(self) -> dict[str, Any]:
        """The settings that differ from their defaults, by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}

    @classmethod
    def resolve(cls, flags: Mapping[str, Any]) -> Settings:
        """Settings from parsed option values (None: given neither as a flag nor as a variable) over defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in flags.items() if name in names and value is not None})

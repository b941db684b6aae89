"""Errors of the agent and its policies; every message says what happened and what to do."""

from __future__ import annotations


class AgentCancelled(Exception):
    """The question was cancelled; the episode stopped at a round boundary or between decode chunks."""


class PolicyConfigError(ValueError):
    """No usable model was configured (no model directory, no endpoint, or a directory that is missing)."""


class EndpointError(RuntimeError):
    """The completions endpoint refused or failed a request; the message carries its status and reason."""

"""Errors of the agent and its policies; every message says what happened and what to do. A cancel raises the
serving layer's Cancelled (model/serving/cancel.py), whichever wait or policy it stops."""

from __future__ import annotations


class PolicyConfigError(ValueError):
    """No usable model was configured (no model directory, no endpoint, or a directory that is missing)."""


class ModelError(RuntimeError):
    """The model could not write a turn; the message says what failed and what to do about it."""


class EndpointError(ModelError):
    """The completions endpoint refused or failed a request; the message carries its status and reason."""


class ModelOutOfMemoryError(ModelError):
    """The local model ran out of memory while reading or writing; the question's caches are freed."""

"""Secrets read from the configuration file are never written to a log line, whatever logged them."""

from __future__ import annotations

import logging
import traceback

MASK = "***"
_secrets: set[str] = set()


def redact_in_logs(secrets: frozenset[str] | set[str]) -> None:
    """Mask these values in every log record from now on (added to those already masked)."""
    _secrets.update(secret for secret in secrets if secret)


def redact(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):  # a secret inside a longer one: the longer first
        text = text.replace(secret, MASK)
    return text


class SecretFilter(logging.Filter):
    """A handler filter that rewrites each record's message and traceback with the secrets masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
            record.exc_info = None
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True

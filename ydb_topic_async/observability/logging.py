"""Structured logging: the context fields every SDK log record carries, and secret redaction.

The SDK logs under ``ydb_topic_async.*`` (``.driver``, ``.writer``, ``.reader``, ``.topic``).
Records about a writer or reader carry ``extra`` fields that structured formatters (JSON
loggers, OpenTelemetry log bridges) pick up as attributes:

- ``ydb_topic``: the full topic path (for a reader, the first of its topics);
- ``ydb_producer_id``, ``ydb_partition_id``: a writer's producer and partition;
- ``ydb_consumer``: a reader's consumer ("" when it reads without one);
- ``ydb_session_id``: the server's id of the current write or read stream, also written in
  the message text so that plain-text logs can be matched with server logs.

Credentials never reach a log record: tokens and passwords the driver handles are registered
with a filter on the SDK's loggers that masks them in messages and tracebacks (as a safety net;
the SDK does not put them in messages to begin with).
"""

from __future__ import annotations

import logging
import traceback
from collections import OrderedDict
from typing import Any

LOGGER_PREFIX = "ydb_topic_async"
REDACTED = "***"
_MIN_SECRET_LENGTH = 6
"""Shorter strings are not masked: they would garble ordinary words in messages."""
_MAX_SECRETS = 256
"""Rotating tokens accumulate; only the most recent ones can still turn up in a log line."""


class _SecretRedactor(logging.Filter):
    """Masks registered secrets in the records of the SDK's loggers."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: OrderedDict[str, None] = OrderedDict()

    def register(self, secret: str) -> None:
        if len(secret) < _MIN_SECRET_LENGTH:
            return
        self._secrets[secret] = None
        self._secrets.move_to_end(secret)
        while len(self._secrets) > _MAX_SECRETS:
            self._secrets.popitem(last=False)

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let the handler report it as it would
            return True
        masked = self._mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_text is None:
            exc_type, exc, tb = record.exc_info
            if exc_type is not None:
                text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip("\n")
                # Formatters print exc_text instead of formatting exc_info again.
                record.exc_text = self._mask(text)
        return True


_redactor = _SecretRedactor()


def register_secret(secret: str | None) -> None:
    """Mask ``secret`` (a token or password) wherever it would appear in the SDK's log records."""
    if secret:
        _redactor.register(secret)
        # Modules that made their logger with logging.getLogger get the filter too.
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if not isinstance(logger, logging.Logger) or not name.startswith(LOGGER_PREFIX + "."):
                continue
            if _redactor not in logger.filters:
                logger.addFilter(_redactor)


def sdk_logger(name: str) -> logging.Logger:
    """The SDK logger ``ydb_topic_async.<name>``, with secret redaction installed."""
    logger = logging.getLogger(f"{LOGGER_PREFIX}.{name}")
    if _redactor not in logger.filters:
        logger.addFilter(_redactor)
    return logger


def writer_fields(topic: str, producer_id: str, partition_id: int | None, session_id: str = "") -> dict[str, Any]:
    """The ``extra`` fields of a writer's log records."""
    return {
        "ydb_topic": topic,
        "ydb_producer_id": producer_id,
        "ydb_partition_id": partition_id,
        "ydb_session_id": session_id,
    }


def reader_fields(topic: str, consumer: str | None, session_id: str = "") -> dict[str, Any]:
    """The ``extra`` fields of a reader's log records."""
    return {"ydb_topic": topic, "ydb_consumer": consumer or "", "ydb_session_id": session_id}


__all__ = ["REDACTED", "register_secret", "sdk_logger"]

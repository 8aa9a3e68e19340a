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
the SDK does not put them in messages to begin with). A record's traceback is formatted and
masked into ``exc_text`` and its ``exc_info`` cleared, so handlers that format ``exc_info``
themselves never see the secret either.
"""

from __future__ import annotations

import logging
import threading
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
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, None] = OrderedDict()
        """Rotating secrets (tokens) in registration order, for evicting the oldest; only touched
        under the lock."""
        self._pinned: set[str] = set()
        """Secrets that live as long as the process may log (passwords, keys, fixed tokens): never evicted."""
        self._secrets: tuple[str, ...] = ()
        """What ``filter`` masks, longest first; replaced whole, never changed in place, so that a
        record logged in one thread is masked safely while another thread registers a secret."""

    def register(self, secret: str, pinned: bool) -> None:
        if len(secret) < _MIN_SECRET_LENGTH:
            return
        with self._lock:
            if pinned:
                self._pinned.add(secret)
            else:
                recent = self._recent
                recent[secret] = None
                recent.move_to_end(secret)
                while len(recent) > _MAX_SECRETS:
                    recent.popitem(last=False)
            # Longest first: a secret that contains another one must be masked whole.
            self._secrets = tuple(sorted(self._pinned.union(self._recent), key=len, reverse=True))

    def mask(self, text: str) -> str:
        """``text`` with every registered secret masked."""
        return self._mask(self._secrets, text)

    @staticmethod
    def _mask(secrets: tuple[str, ...], text: str) -> str:
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets
        if not secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let the handler report it as it would
            return True
        masked = self._mask(secrets, message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info:
            exc_type, exc, tb = record.exc_info
            if exc_type is not None and record.exc_text is None:
                record.exc_text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip("\n")
            # Structured handlers (JSON, OpenTelemetry) format exc_info themselves, bypassing
            # exc_text: leave them only the masked text, which standard formatters print as is.
            record.exc_info = None
        if record.exc_text:
            record.exc_text = self._mask(secrets, record.exc_text)
        if record.stack_info:
            record.stack_info = self._mask(secrets, record.stack_info)
        return True


_redactor = _SecretRedactor()


def register_secret(secret: str | None, *, pinned: bool = False) -> None:
    """Mask ``secret`` (a token or password) wherever it would appear in the SDK's log records.

    Rotating tokens are masked among the most recent ``_MAX_SECRETS``; a ``pinned`` secret (a
    password, a private key, a fixed token) is masked for good, however many tokens follow it.
    """
    if secret:
        _redactor.register(secret, pinned)
        # Modules that made their logger with logging.getLogger get the filter too.
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if not isinstance(logger, logging.Logger) or not name.startswith(LOGGER_PREFIX + "."):
                continue
            if _redactor not in logger.filters:
                logger.addFilter(_redactor)


def mask_secrets(text: str) -> str:
    """``text`` with every registered secret masked: for text from elsewhere (a token service's
    error description) that goes into an exception, which no logging filter sees."""
    return _redactor.mask(text)


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

"""The client context: what every client, writer and reader is built from.

A ``Driver`` makes one ``ClientContext`` and hands it down: the transport (channels, discovery,
auth, unary calls, streams), the database, the retry policies of unary calls and of streams, the
metrics recorder, the tracing, and the size limit of one gRPC message. Everything below the
``Driver`` (topic administration, writers, readers, transactions) takes what it needs from here,
so none of it holds or imports the ``Driver``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import InvalidArgumentError
from ._retry import RetryPolicy
from ._transport import Transport
from ._validate import check_timeout
from .observability.metrics import MetricsRecorder
from .observability.tracing import OpenTelemetryTracing

if TYPE_CHECKING:
    from google.protobuf.message import Message

M = TypeVar("M", bound="Message")


@dataclass(frozen=True, eq=False)
class ClientContext:
    """What the clients of one driver share. Made by the ``Driver``; read-only afterwards."""

    transport: Transport
    retry: RetryPolicy
    """The policy of unary calls not given one (topic administration, transactions)."""
    stream_retry: RetryPolicy
    """The reconnect policy of writers and readers not given one."""
    metrics: MetricsRecorder
    """Receives the counters and latencies of every writer and reader."""
    tracing: OpenTelemetryTracing | None
    """Traces writes and reads, or None when off."""
    max_message_size: int
    """The largest gRPC message the channels send or receive, in bytes."""

    @property
    def database(self) -> str:
        """The database every path is relative to."""
        return self.transport.database

    def full_path(self, path: str) -> str:
        """``path`` made absolute against the database (``events`` -> ``/local/events``)."""
        if not isinstance(path, str) or not path.strip("/"):
            raise InvalidArgumentError(f"topic path must be a non-empty string, got {path!r}")
        if path.startswith("/"):
            return path.rstrip("/")
        return f"{self.database.rstrip('/')}/{path.rstrip('/')}"

    def check_open(self) -> None:
        """Raise ``ClosedError`` once the driver has closed its connections."""
        self.transport.check_open()

    async def call(
        self,
        method: str,
        request: Message,
        response_cls: type[Message],
        result_cls: type[M] | None,
        *,
        idempotent: bool,
        timeout: float | None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """One ``Operation``-returning unary call (``method`` is its full path): its unpacked
        result, or None without ``result_cls``. ``timeout`` bounds it whole, retries included;
        ``retry`` replaces the unary policy."""
        return await self.transport.call_operation(
            method,
            request,
            response_cls,
            result_cls,
            idempotent=idempotent,
            timeout=check_timeout(timeout),
            retry=retry,
        )


__all__ = ["ClientContext"]

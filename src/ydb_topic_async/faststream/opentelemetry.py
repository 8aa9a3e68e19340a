"""FastStream's OpenTelemetry middleware for ``YdbBroker``: spans and metrics of what is
published and consumed, with YDB's attributes (topic, partition, offset, key, consumer).

    broker = YdbBroker(..., middlewares=[YdbTelemetryMiddleware(tracer_provider=provider)])

The trace context travels in the message headers (its metadata items, ``traceparent`` and
``tracestate``), the same items the SDK's own tracing (``Driver(tracing=True)``) writes and
reads: a consume span continues the trace of a message written by any YDB writer that carries one.
"""

from __future__ import annotations

from typing import Any

from faststream.message import StreamMessage
from faststream.response import PublishCommand

from ..extras import raise_for_missing_extra

try:
    from faststream.opentelemetry import TelemetryMiddleware, TelemetrySettingsProvider
    from faststream.opentelemetry.consts import MESSAGING_DESTINATION_PUBLISH_NAME
    from opentelemetry.metrics import Meter, MeterProvider
    from opentelemetry.trace import TracerProvider
except ImportError as exc:
    raise_for_missing_extra(
        exc, __name__, "FastStream's OpenTelemetry support", None, ("opentelemetry",),
        install="pip install 'faststream[otel]'",
    )
    raise

from ._message import YdbMessage
from ._response import YdbPublishCommand

MESSAGING_SYSTEM = "ydb"


class YdbTelemetrySettingsProvider(TelemetrySettingsProvider[Any, YdbPublishCommand]):
    """The span attributes of YDB messages (OpenTelemetry's messaging conventions)."""

    def __init__(self) -> None:
        self.messaging_system = MESSAGING_SYSTEM

    def get_consume_attrs_from_message(self, msg: StreamMessage[Any]) -> dict[str, Any]:
        batch = isinstance(msg.body, list)
        attrs: dict[str, Any] = {
            "messaging.system": self.messaging_system,
            "messaging.message.id": msg.message_id,
            "messaging.message.conversation_id": msg.correlation_id,
            "messaging.message.body.size": sum(map(len, msg.body)) if batch else len(msg.body),
        }
        if isinstance(msg, YdbMessage):
            attrs[MESSAGING_DESTINATION_PUBLISH_NAME] = msg.topic
            attrs["messaging.destination.partition.id"] = str(msg.partition_id)
            if batch:
                attrs["messaging.batch.message_count"] = len(msg.body)
            else:
                attrs["messaging.ydb.offset"] = msg.offset
                if msg.key is not None:
                    attrs["messaging.ydb.message.key"] = msg.key.decode("utf-8", "replace")
        return attrs

    def get_consume_destination_name(self, msg: StreamMessage[Any]) -> str:
        return msg.topic if isinstance(msg, YdbMessage) else ""

    def get_publish_attrs_from_cmd(self, cmd: YdbPublishCommand) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "messaging.system": self.messaging_system,
            "messaging.destination.name": cmd.destination,
            "messaging.message.conversation_id": cmd.correlation_id,
        }
        if getattr(cmd, "partition", None) is not None:
            attrs["messaging.destination.partition.id"] = str(cmd.partition)
        key = getattr(cmd, "key", None)
        if key is not None:
            attrs["messaging.ydb.message.key"] = key if isinstance(key, str) else key.decode("utf-8", "replace")
        if getattr(cmd, "producer_id", None):
            attrs["messaging.ydb.producer_id"] = cmd.producer_id
        return attrs

    def get_publish_destination_name(self, cmd: PublishCommand) -> str:
        return cmd.destination


def telemetry_attributes_provider_factory(msg: Any) -> YdbTelemetrySettingsProvider:
    return YdbTelemetrySettingsProvider()


class YdbTelemetryMiddleware(TelemetryMiddleware[YdbPublishCommand]):
    """FastStream's ``TelemetryMiddleware`` with YDB's attributes."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        meter: Meter | None = None,
        include_messages_counters: bool = True,
    ) -> None:
        super().__init__(
            settings_provider_factory=telemetry_attributes_provider_factory,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            meter=meter,
            include_messages_counters=include_messages_counters,
        )


__all__ = ["YdbTelemetryMiddleware", "YdbTelemetrySettingsProvider"]

"""FastStream's Prometheus middleware for ``YdbBroker``: counts and latencies of what is
published and consumed, labelled with the topic.

    broker = YdbBroker(..., middlewares=[YdbPrometheusMiddleware(registry=registry)])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.constants import EMPTY
from faststream.message import StreamMessage
from faststream.response import PublishCommand

from ..extras import raise_for_missing_extra

try:
    from faststream.prometheus import ConsumeAttrs, MetricsSettingsProvider, PrometheusMiddleware
except ImportError as exc:
    raise_for_missing_extra(
        exc, __name__, "FastStream's Prometheus support", None, ("prometheus_client",),
        install="pip install 'faststream[prometheus]'",
    )
    raise

from ._message import YdbMessage
from ._response import YdbPublishCommand

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class YdbMetricsSettingsProvider(MetricsSettingsProvider[Any, YdbPublishCommand]):
    """The metric labels of YDB messages: the topic, the size, the count (a batch's messages)."""

    def __init__(self) -> None:
        self.messaging_system = "ydb"

    def get_consume_attrs_from_message(self, msg: StreamMessage[Any]) -> ConsumeAttrs:
        batch = isinstance(msg.body, list)
        return {
            "destination_name": msg.topic if isinstance(msg, YdbMessage) else "",
            "message_size": sum(map(len, msg.body)) if batch else len(msg.body),
            "messages_count": len(msg.body) if batch else 1,
        }

    def get_publish_destination_name_from_cmd(self, cmd: PublishCommand) -> str:
        return cmd.destination


def settings_provider_factory(msg: Any) -> YdbMetricsSettingsProvider:
    return YdbMetricsSettingsProvider()


class YdbPrometheusMiddleware(PrometheusMiddleware[Any, YdbPublishCommand]):
    """FastStream's ``PrometheusMiddleware`` with YDB's labels."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        app_name: str = EMPTY,
        metrics_prefix: str = "faststream",
        received_messages_size_buckets: Sequence[float] | None = None,
        custom_labels: dict[str, str | Callable[[Any], str]] | None = None,
    ) -> None:
        super().__init__(
            settings_provider_factory=settings_provider_factory,
            registry=registry,
            app_name=app_name,
            metrics_prefix=metrics_prefix,
            received_messages_size_buckets=received_messages_size_buckets,
            custom_labels=custom_labels,
        )


__all__ = ["YdbMetricsSettingsProvider", "YdbPrometheusMiddleware"]

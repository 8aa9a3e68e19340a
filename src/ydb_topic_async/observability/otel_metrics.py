"""OpenTelemetry metrics: the SDK's counters, gauges and latencies as OpenTelemetry instruments.

    from ydb_topic_async import Driver, OpenTelemetryMetrics

    async with Driver(endpoint, database, metrics=OpenTelemetryMetrics()) as driver:
        ...

The instruments follow OpenTelemetry's semantic conventions for messaging clients where one
fits (``messaging.client.sent.messages``, ``messaging.client.consumed.messages``,
``messaging.client.operation.duration``, with ``messaging.system="ydb"``,
``messaging.destination.name``, ``messaging.destination.partition.id``,
``messaging.consumer.group.name``, ``messaging.operation.name``/``type`` and ``error.type``);
what the conventions have no instrument for is named under ``messaging.ydb.``, as the tracing's
YDB-specific span attributes are. ``docs/observability.md`` lists every instrument.

The recorder is called once per server response (never per message) and keeps one attribute
dict per topic, partition, consumer or error kind, made on first use and passed as it is to
every later measurement, so the hot path allocates nothing of its own.

Needs ``opentelemetry-api``, the ``otel`` extra; an SDK (``opentelemetry-sdk``) with a metric
reader (Prometheus, OTLP, ...) is what exports the figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import InvalidArgumentError
from ..extras import missing_dependency
from .metrics import NoopMetrics
from .tracing import MESSAGING_SYSTEM

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.util.types import Attributes

_METER_NAME = "ydb_topic_async"

SENT_MESSAGES = "messaging.client.sent.messages"
CONSUMED_MESSAGES = "messaging.client.consumed.messages"
OPERATION_DURATION = "messaging.client.operation.duration"
SENT_BYTES = "messaging.ydb.client.sent.bytes"
CONSUMED_BYTES = "messaging.ydb.client.consumed.bytes"
WRITER_BUFFER_MESSAGES = "messaging.ydb.writer.buffer.messages"
WRITER_BUFFER_SIZE = "messaging.ydb.writer.buffer.size"
READER_BUFFER_MESSAGES = "messaging.ydb.reader.buffer.messages"
READER_BUFFER_SIZE = "messaging.ydb.reader.buffer.size"
CONSUMER_LAG = "messaging.ydb.consumer.lag"
RECONNECTS = "messaging.ydb.client.reconnects"
RETRIES = "messaging.ydb.client.retries"
TRANSACTION_ATTEMPTS = "messaging.ydb.transaction.attempts"

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""The bucket boundaries the conventions advise for ``messaging.client.operation.duration``."""

_SYSTEM = "messaging.system"
_DESTINATION = "messaging.destination.name"
_PARTITION = "messaging.destination.partition.id"
_GROUP = "messaging.consumer.group.name"
_OPERATION_NAME = "messaging.operation.name"
_OPERATION_TYPE = "messaging.operation.type"
_WRITE_STATUS = "messaging.ydb.write_status"
_ERROR_TYPE = "error.type"


class OpenTelemetryMetrics(NoopMetrics):
    """Records the SDK's metrics with OpenTelemetry; pass it as ``Driver(..., metrics=...)``.

    Args:
        meter_provider: where the instruments are made; defaults to the global meter provider
            (``opentelemetry.metrics.set_meter_provider``). Without an OpenTelemetry SDK
            configured, the global one records nothing.

    Raises ``MissingDependencyError`` when ``opentelemetry-api`` is not installed. One recorder
    may serve several drivers: their figures add up under the same attributes.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        try:
            from opentelemetry import metrics
        except ImportError as exc:
            raise missing_dependency(exc, "OpenTelemetry metrics", "the OpenTelemetry API", "otel") from exc
        from .._version import __version__

        if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
            raise InvalidArgumentError(
                f"meter_provider must be an OpenTelemetry MeterProvider, not {type(meter_provider).__name__}"
            )
        meter = metrics.get_meter(_METER_NAME, __version__, meter_provider=meter_provider)
        self._sent = meter.create_counter(
            SENT_MESSAGES, unit="{message}", description="Messages the server acknowledged: stored, or skipped as"
            " duplicates of messages stored before (messaging.ydb.write_status).",
        )
        self._sent_bytes = meter.create_counter(
            SENT_BYTES, unit="By", description="Payload bytes of the messages the server stored."
        )
        self._consumed = meter.create_counter(
            CONSUMED_MESSAGES, unit="{message}", description="Messages received from the server."
        )
        self._consumed_bytes = meter.create_counter(
            CONSUMED_BYTES, unit="By", description="Payload bytes received, decoded, as their writers declared them."
        )
        self._duration = meter.create_histogram(
            OPERATION_DURATION, unit="s", explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            description="Write: from sending a request to its acknowledgement. Commit: from sending a"
            " partition's commit to the server's confirmation.",
        )
        self._writer_buffer = meter.create_up_down_counter(
            WRITER_BUFFER_MESSAGES, unit="{message}", description="Messages accepted by writers, not yet acknowledged."
        )
        self._writer_buffer_size = meter.create_up_down_counter(
            WRITER_BUFFER_SIZE, unit="By",
            description="Bytes of the messages accepted by writers, not yet acknowledged.",
        )
        self._reader_buffer = meter.create_up_down_counter(
            READER_BUFFER_MESSAGES, unit="{message}", description="Messages received by readers, not yet handed out."
        )
        self._reader_buffer_size = meter.create_up_down_counter(
            READER_BUFFER_SIZE, unit="By",
            description="Decoded bytes of the messages received by readers, not yet handed out.",
        )
        self._lag = meter.create_up_down_counter(
            CONSUMER_LAG, unit="{message}",
            description="Offsets between the consumer's committed offset and the partition's end, as readers know it.",
        )
        self._reconnects = meter.create_counter(
            RECONNECTS, unit="{reconnect}", description="Write and read streams that broke and were opened again."
        )
        self._retries = meter.create_counter(
            RETRIES, unit="{retry}", description="Unary calls retried after a retriable error."
        )
        self._transaction_attempts = meter.create_counter(
            TRANSACTION_ATTEMPTS, unit="{attempt}",
            description="Attempts of retry_tx and of transactional consumers' batches, by outcome"
            " (committed, retried, failed) and whether a lost commit was settled from the consumer offsets.",
        )
        self._transaction_attributes: dict[tuple[str, bool], Attributes] = {}
        self._sent_attributes: dict[tuple[str, int], tuple[Attributes, Attributes, Attributes]] = {}
        self._consumed_attributes: dict[tuple[str, int], Attributes] = {}
        self._write_duration_attributes: dict[str, Attributes] = {}
        self._commit_duration_attributes: dict[tuple[str, str], Attributes] = {}
        self._topic_attributes: dict[str, Attributes] = {}
        self._consumer_attributes: dict[str, Attributes] = {}
        self._lag_attributes: dict[tuple[str, int, str], Attributes] = {}
        self._error_attributes: dict[tuple[str, str, type[BaseException]], Attributes] = {}

    # --- writers -------------------------------------------------------------------------------

    def writer_acks(self, topic: str, partition_id: int, written: int, skipped: int, written_bytes: int) -> None:
        attributes = self._sent_attributes.get((topic, partition_id))
        if attributes is None:
            attributes = self._sent_attributes[(topic, partition_id)] = _sent_attributes(topic, partition_id)
        if written:
            self._sent.add(written, attributes[0])
        if skipped:
            self._sent.add(skipped, attributes[1])
        if written_bytes:
            self._sent_bytes.add(written_bytes, attributes[2])

    def writer_ack_latency(self, topic: str, seconds: float, messages: int) -> None:
        attributes = self._write_duration_attributes.get(topic)
        if attributes is None:
            attributes = self._write_duration_attributes[topic] = {
                _SYSTEM: MESSAGING_SYSTEM, _OPERATION_NAME: "write", _OPERATION_TYPE: "send", _DESTINATION: topic,
            }
        self._duration.record(seconds, attributes)

    def writer_buffer_change(self, topic: str, messages: int, nbytes: int) -> None:
        attributes = self._topic_attributes.get(topic)
        if attributes is None:
            attributes = self._topic_attributes[topic] = {_SYSTEM: MESSAGING_SYSTEM, _DESTINATION: topic}
        if messages:
            self._writer_buffer.add(messages, attributes)
        if nbytes:
            self._writer_buffer_size.add(nbytes, attributes)

    def writer_reconnect(self, topic: str, error: BaseException) -> None:
        self._reconnects.add(1, self._error("send", topic, error))

    # --- readers -------------------------------------------------------------------------------

    def reader_messages(self, topic: str, partition_id: int, messages: int, nbytes: int) -> None:
        attributes = self._consumed_attributes.get((topic, partition_id))
        if attributes is None:
            attributes = self._consumed_attributes[(topic, partition_id)] = {
                _SYSTEM: MESSAGING_SYSTEM, _OPERATION_NAME: "receive", _OPERATION_TYPE: "receive",
                _DESTINATION: topic, _PARTITION: str(partition_id),
            }
        self._consumed.add(messages, attributes)
        if nbytes:
            self._consumed_bytes.add(nbytes, attributes)

    def reader_buffer_change(self, consumer: str, messages: int, nbytes: int) -> None:
        attributes = self._consumer_attributes.get(consumer)
        if attributes is None:
            attributes = self._consumer_attributes[consumer] = _with_group({_SYSTEM: MESSAGING_SYSTEM}, consumer)
        if messages:
            self._reader_buffer.add(messages, attributes)
        if nbytes:
            self._reader_buffer_size.add(nbytes, attributes)

    def reader_commit_latency(self, topic: str, consumer: str, seconds: float) -> None:
        attributes = self._commit_duration_attributes.get((topic, consumer))
        if attributes is None:
            attributes = self._commit_duration_attributes[(topic, consumer)] = _with_group(
                {_SYSTEM: MESSAGING_SYSTEM, _OPERATION_NAME: "commit", _OPERATION_TYPE: "settle", _DESTINATION: topic},
                consumer,
            )
        self._duration.record(seconds, attributes)

    def reader_lag_change(self, topic: str, partition_id: int, consumer: str, change: int) -> None:
        attributes = self._lag_attributes.get((topic, partition_id, consumer))
        if attributes is None:
            attributes = self._lag_attributes[(topic, partition_id, consumer)] = _with_group(
                {_SYSTEM: MESSAGING_SYSTEM, _DESTINATION: topic, _PARTITION: str(partition_id)}, consumer
            )
        self._lag.add(change, attributes)

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        self._reconnects.add(1, self._error("receive", consumer, error))

    # --- unary calls ---------------------------------------------------------------------------

    def retry(self, operation: str, error: BaseException) -> None:
        self._retries.add(1, self._error("call", operation, error))

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        attributes = self._transaction_attributes.get((outcome, settled))
        if attributes is None:
            attributes = self._transaction_attributes[(outcome, settled)] = {
                _SYSTEM: MESSAGING_SYSTEM,
                "messaging.ydb.transaction.outcome": outcome,
                "messaging.ydb.transaction.settled": settled,
            }
        self._transaction_attempts.add(1, attributes)

    def _error(self, kind: str, label: str, error: BaseException) -> Attributes:
        """The attributes of a reconnect or retry: what broke (the writer's topic, the reader's
        consumer, the call's method) and the exception's class, its ``error.type``."""
        key = (kind, label, type(error))
        attributes = self._error_attributes.get(key)
        if attributes is None:
            base: dict[str, str] = {_SYSTEM: MESSAGING_SYSTEM, _ERROR_TYPE: type(error).__name__}
            if kind == "send":
                base.update({_OPERATION_TYPE: "send", _DESTINATION: label})
            elif kind == "receive":
                base[_OPERATION_TYPE] = "receive"
                _with_group(base, label)
            else:
                base["rpc.method"] = label
            attributes = self._error_attributes[key] = base
        return attributes


def _sent_attributes(topic: str, partition_id: int) -> tuple[Attributes, Attributes, Attributes]:
    """The attributes of stored messages, skipped duplicates, and stored bytes of a partition."""
    base = {
        _SYSTEM: MESSAGING_SYSTEM, _OPERATION_NAME: "write", _OPERATION_TYPE: "send",
        _DESTINATION: topic, _PARTITION: str(partition_id),
    }
    return {**base, _WRITE_STATUS: "written"}, {**base, _WRITE_STATUS: "skipped"}, base


def _with_group(attributes: dict[str, str], consumer: str) -> dict[str, str]:
    """``attributes`` with the consumer group, for a reader with a consumer."""
    if consumer:
        attributes[_GROUP] = consumer
    return attributes


__all__ = ["OpenTelemetryMetrics"]

"""FastStream's OpenTelemetry and Prometheus middlewares on ``YdbBroker``, over the local server,
and the trace context shared with the SDK's own tracing through the message metadata."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

import ydb_topic_async as yta
from ydb_topic_async.faststream.opentelemetry import YdbTelemetryMiddleware
from ydb_topic_async.faststream.prometheus import YdbPrometheusMiddleware
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_by_partition
from .._polling import eventually
from ._brokers import Seen, broker_for, running

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _spans(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is kind]


async def test_publish_and_consume_spans_carry_ydb_attributes_and_one_trace(
    server: LocalTopicServer, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    broker = broker_for(server, auto_create_topics=True, middlewares=[YdbTelemetryMiddleware(tracer_provider=provider)])
    seen = Seen()

    @broker.subscriber("traced", consumer="c")
    async def handle(body: str) -> None:
        seen.add(body)

    async with running(broker) as br:
        await br.publish("hello", "traced", key="k", partition=0)
        await seen.wait_for(1)
        await eventually(lambda: len(_spans(exporter, SpanKind.CONSUMER)) >= 1, "the consume span ended")
    (published,) = [s for s in _spans(exporter, SpanKind.PRODUCER) if s.name == "traced publish"]
    (consumed,) = [s for s in _spans(exporter, SpanKind.CONSUMER) if s.name == "/local/traced process"]
    assert published.attributes is not None and consumed.attributes is not None
    assert published.attributes["messaging.system"] == "ydb"
    assert published.attributes["messaging.destination.name"] == "traced"
    assert published.attributes["messaging.ydb.message.key"] == "k"
    assert consumed.attributes["messaging.system"] == "ydb"
    assert consumed.attributes["messaging.destination.partition.id"] == "0"
    assert consumed.attributes["messaging.ydb.offset"] == 0
    assert published.context is not None and consumed.context is not None
    assert consumed.context.trace_id == published.context.trace_id  # the context travelled in the metadata
    traceparent = dict(stored_by_partition(server, "traced")[0][0].metadata)["traceparent"]
    assert f"{published.context.trace_id:032x}" in traceparent.decode()


async def test_a_message_traced_by_the_sdk_continues_its_trace_in_the_handler(
    server: LocalTopicServer, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A writer of the SDK with tracing on puts its span's context in the message metadata; the
    broker's telemetry middleware reads it from the headers and parents the consume span on it."""
    broker = broker_for(server, auto_create_topics=True, middlewares=[YdbTelemetryMiddleware(tracer_provider=provider)])
    seen = Seen()

    @broker.subscriber("from-sdk", consumer="c")
    async def handle(body: str) -> None:
        seen.add(body)

    tracing = yta.OpenTelemetryTracing(provider)
    async with running(broker):
        async with (
            yta.Driver(server.endpoint, server.database, tracing=tracing) as driver,
            driver.topic.writer("from-sdk", producer_id="p") as writer,
        ):
            await writer.write_with_ack(b"traced write")
        await seen.wait_for(1)
        await eventually(lambda: len(_spans(exporter, SpanKind.CONSUMER)) >= 1, "the consume span ended")
    (write,) = [s for s in _spans(exporter, SpanKind.PRODUCER) if s.name == "write /local/from-sdk"]
    (consumed,) = [s for s in _spans(exporter, SpanKind.CONSUMER) if s.name == "/local/from-sdk process"]
    assert write.context is not None and consumed.parent is not None
    assert (consumed.parent.trace_id, consumed.parent.span_id) == (write.context.trace_id, write.context.span_id)


async def test_prometheus_counts_what_is_received_and_published(server: LocalTopicServer) -> None:
    registry = CollectorRegistry()
    broker = broker_for(
        server, auto_create_topics=True, middlewares=[YdbPrometheusMiddleware(registry=registry, app_name="svc")]
    )
    seen = Seen()

    @broker.subscriber("counted", consumer="c")
    async def handle(body: str) -> None:
        seen.add(body)

    async with running(broker) as br:
        for text in ("a", "bb", "ccc"):
            await br.publish(text, "counted")
        await seen.wait_for(3)
        await eventually(
            lambda: registry.get_sample_value(
                "faststream_received_processed_messages_total",
                {"app_name": "svc", "broker": "ydb", "handler": "/local/counted", "status": "acked"},
            ) == 3,
            "three messages processed and acknowledged",
        )
    published = registry.get_sample_value(
        "faststream_published_messages_total",
        {"app_name": "svc", "broker": "ydb", "destination": "counted", "status": "success"},
    )
    assert published == 3
    size = registry.get_sample_value(
        "faststream_received_messages_size_bytes_sum", {"app_name": "svc", "broker": "ydb", "handler": "/local/counted"}
    )
    assert size == 6

"""OpenTelemetry tracing end to end on the local server, with the SDK's in-memory span exporter."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import silent_endpoint

from .._helpers import stored, stored_data

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> yta.OpenTelemetryTracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return yta.OpenTelemetryTracing(tracer_provider=provider)


def _ids(context: object) -> tuple[int, int]:
    return context.trace_id, context.span_id  # type: ignore[attr-defined]


def _spans(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is kind]


async def test_consumer_spans_link_to_producer_spans(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced", consumers=["c"])
        path = driver.topic.full_path("traced")
        async with driver.topic.writer("traced", producer_id="tracer", partition_id=0) as writer:
            await writer.write(b"plain")
            await writer.write_with_ack(yta.Message(b"with-meta", metadata={"k": b"v"}))
        producers = _spans(exporter, SpanKind.PRODUCER)
        assert len(producers) == 2
        for offset, span in enumerate(producers):
            assert span.name == f"write {path}"
            attributes = dict(span.attributes or {})
            assert attributes["messaging.system"] == "ydb"
            assert attributes["messaging.destination.name"] == path
            assert attributes["messaging.destination.partition.id"] == "0"
            assert attributes["messaging.message.id"] == str(offset + 1)  # the seq_no
            assert attributes["messaging.ydb.offset"] == offset
            assert span.status.status_code is StatusCode.UNSET

        # The context travels in the stored messages' metadata, next to the user's own items.
        messages = stored(server, path)
        for message, span in zip(messages, producers, strict=True):
            items = dict(message.metadata)
            trace_id = format(span.context.trace_id, "032x")
            span_id = format(span.context.span_id, "016x")
            flags = format(span.context.trace_flags, "02x")
            assert items["traceparent"] == f"00-{trace_id}-{span_id}-{flags}".encode()
        assert dict(messages[1].metadata)["k"] == b"v"

        async with driver.topic.reader("traced", consumer="c") as reader:
            first = await reader.receive_message(timeout=10)
            assert first.data == b"plain"
            assert first.metadata_items.keys() == {"traceparent"}
            batch = await reader.receive_batch(timeout=10)
            assert [m.data for m in batch] == [b"with-meta"]
            parent = tracing.extract_context(batch[0])

    consumers = _spans(exporter, SpanKind.CONSUMER)
    assert len(consumers) == 2
    for consumer, producer in zip(consumers, producers, strict=True):
        assert consumer.name == f"receive {path}"
        assert [_ids(link.context) for link in consumer.links] == [_ids(producer.context)]
        assert consumer.links[0].context.is_remote
        attributes = dict(consumer.attributes or {})
        assert attributes["messaging.system"] == "ydb"
        assert attributes["messaging.consumer.group.name"] == "c"
        assert attributes["messaging.destination.partition.id"] == "0"
    assert _ids(trace.get_current_span(parent).get_span_context()) == _ids(producers[1].context)


async def test_a_failed_write_ends_its_span_with_the_error(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        writer = driver.topic.writer("no-such-topic", retry=yta.RetryPolicy.no_retries())
        with pytest.raises(yta.SchemeError):
            await writer.write_with_ack(b"lost")
        with pytest.raises(yta.SchemeError):
            await writer.close()
    (span,) = _spans(exporter, SpanKind.PRODUCER)
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


async def test_a_context_set_by_the_caller_is_kept(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced-own")
        async with driver.topic.writer("traced-own", partition_id=0) as writer:
            await writer.write([yta.Message("mine", metadata=[("traceparent", own)])])
        (message,) = stored(server, driver.topic.full_path("traced-own"))
    assert dict(message.metadata) == {"traceparent": own.encode()}
    assert len(_spans(exporter, SpanKind.PRODUCER)) == 1


def test_tracing_without_opentelemetry_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(yta.MissingDependencyError, match=r"pip install -e \"\.\[otel\]\" in a clone"):
        yta.Driver("grpc://127.0.0.1:2136", "/local", tracing=True)
    with pytest.raises(ImportError):  # also an ImportError, for code that guards imports that way
        yta.OpenTelemetryTracing()


def test_the_package_imports_without_opentelemetry() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        import ydb_topic_async
        driver = ydb_topic_async.Driver("grpc://127.0.0.1:2136", "/local")
        assert driver.tracing is None
        assert not any(name.startswith("opentelemetry.") for name in sys.modules)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_bad_tracing_argument() -> None:
    with pytest.raises(yta.InvalidArgumentError, match="tracing must be"):
        yta.Driver("grpc://127.0.0.1:2136", "/local", tracing="yes")  # type: ignore[arg-type]


async def test_bad_input_is_refused_as_without_tracing(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced-bad")
        async with driver.topic.writer("traced-bad", partition_id=0) as writer:
            with pytest.raises(yta.InvalidArgumentError, match="write takes bytes, str, Message or a list"):
                await writer.write(42)  # type: ignore[arg-type]
            with pytest.raises(yta.InvalidArgumentError, match="a message must be bytes, str or Message, not int"):
                await writer.write([b"ok", 42])  # type: ignore[list-item]
            await writer.write(b"fine")
        assert stored_data(server, driver.topic.full_path("traced-bad")) == [b"fine"]
    # A call refused at once wrote nothing: no producer span (tracing sees accepted messages only,
    # so it never checks a message again).
    producers = _spans(exporter, SpanKind.PRODUCER)
    assert [s.status.status_code for s in producers] == [StatusCode.UNSET]


async def test_a_skipped_duplicate_is_marked_on_its_span(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced-dup")
        for _ in range(2):
            async with driver.topic.writer("traced-dup", producer_id="dup", partition_id=0, auto_seqno=False) as writer:
                await writer.write_with_ack(yta.Message(b"once", seq_no=1))
    first, second = _spans(exporter, SpanKind.PRODUCER)
    assert "messaging.ydb.write_status" not in (first.attributes or {})
    assert (second.attributes or {})["messaging.ydb.write_status"] == "skipped"
    assert (second.attributes or {})["messaging.message.id"] == "1"
    assert "messaging.ydb.offset" not in (second.attributes or {})


async def test_metadata_given_as_a_one_shot_iterable_is_sent_whole(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced-once")
        async with driver.topic.writer("traced-once", partition_id=0) as writer:
            pairs = [("traceparent", own), ("user", "keep")]
            await writer.write_with_ack(yta.Message(b"y", metadata=(pair for pair in pairs)))
            await writer.write_with_ack(yta.Message(b"z", metadata=(pair for pair in [("user", "also")])))
        first, second = stored(server, driver.topic.full_path("traced-once"))
    assert dict(first.metadata) == {"traceparent": own.encode(), "user": b"keep"}
    items = dict(second.metadata)
    assert items["user"] == b"also"
    assert items["traceparent"].startswith(b"00-")
    assert len(_spans(exporter, SpanKind.PRODUCER)) == 2


async def test_metadata_with_no_room_for_the_context_is_written_without_it(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    near_char_limit = {"k": "v" * 4090}  # 4091 of the 4096 characters a message may carry
    at_item_limit = [(f"k{i}", b"") for i in range(1000)]
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced-full")
        async with driver.topic.writer("traced-full", partition_id=0) as writer:
            await writer.write_with_ack(yta.Message(b"chars", metadata=near_char_limit))
            await writer.write_with_ack(yta.Message(b"items", metadata=at_item_limit))
            await writer.write_with_ack(yta.Message(b"room", metadata={"k": "v" * 100}))
        by_chars, by_items, with_room = stored(server, driver.topic.full_path("traced-full"))
    assert dict(by_chars.metadata) == {"k": b"v" * 4090}
    assert len(by_items.metadata) == 1000 and "traceparent" not in dict(by_items.metadata)
    assert "traceparent" in dict(with_room.metadata)
    spans = _spans(exporter, SpanKind.PRODUCER)
    assert [s.status.status_code for s in spans] == [StatusCode.UNSET] * 3
    skipped = [[e.name for e in s.events] for s in spans]
    assert skipped == [["ydb.trace_context_skipped"], ["ydb.trace_context_skipped"], []]


async def test_bad_metadata_raises_the_writers_error_with_tracing_on(
    server: LocalTopicServer, exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, tracing=tracing) as driver:
        await driver.topic.create_topic("traced-bad-meta")
        async with driver.topic.writer("traced-bad-meta", partition_id=0) as writer:
            with pytest.raises(yta.InvalidArgumentError, match="metadata items must be"):
                await writer.write(yta.Message(b"x", metadata=[("a",)]))  # type: ignore[list-item]
            with pytest.raises(yta.InvalidArgumentError, match="metadata must be a mapping or an iterable"):
                await writer.write(yta.Message(b"x", metadata=5))  # type: ignore[arg-type]
            with pytest.raises(yta.InvalidArgumentError, match="the limit is 4096"):
                await writer.write(yta.Message(b"x", metadata={"k": "v" * 4096}))
            await writer.write(b"fine")
        assert stored_data(server, driver.topic.full_path("traced-bad-meta")) == [b"fine"]
    statuses = [s.status.status_code for s in _spans(exporter, SpanKind.PRODUCER)]
    assert statuses == [StatusCode.UNSET]


async def test_a_write_that_gets_no_buffer_space_ends_its_span_with_the_error(
    exporter: InMemorySpanExporter, tracing: yta.OpenTelemetryTracing
) -> None:
    async with (
        silent_endpoint() as endpoint,
        yta.Driver(endpoint, "/local", discovery=False, tracing=tracing) as driver,
    ):
        writer = driver.topic.writer("t", max_buffer_messages=1, buffer_wait_timeout=0.1)
        await writer.write(b"held")  # accepted, never acknowledged: the server does not answer
        with pytest.raises(yta.BufferFullTimeoutError):
            await writer.write(b"no room")
        with pytest.raises(yta.OperationTimeoutError):
            await writer.close(timeout=0.1)
    await asyncio.sleep(0)  # spans end in their futures' done-callbacks
    refused, held = _spans(exporter, SpanKind.PRODUCER)
    assert held.status.status_code is StatusCode.ERROR  # failed by the close that gave up on it
    assert refused.status.status_code is StatusCode.ERROR
    assert [event.name for event in refused.events] == ["exception"]
    assert "BufferFullTimeoutError" in str(refused.events[0].attributes)

"""Optional OpenTelemetry tracing: producer spans for writes, consumer spans linked to them for reads.

    from ydb_topic_async import Driver, OpenTelemetryTracing

    async with Driver(endpoint, database, tracing=OpenTelemetryTracing()) as driver:  # or tracing=True
        ...

With tracing on, every message a writer accepts gets a ``PRODUCER`` span ("write <topic>") that
ends when the server acknowledges the message (with its partition, seq_no and offset) or when
the write fails. The span's W3C trace context (``traceparent``, ``tracestate``) travels in the
message's metadata items, so any reader, in any language, can continue the trace. A reader
with tracing on starts a ``CONSUMER`` span ("receive <topic>") for each message, or each batch,
it hands out, linked to the producer spans of the messages that carry a context.

Needs ``opentelemetry-api`` (``pip install 'ydb-topic-async[otel]'``); without it the package
imports fine and only enabling tracing raises ``MissingDependencyError``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import InvalidArgumentError, MissingDependencyError
from ..writer.messages import Message
from ..writer.writer import MAX_METADATA_CHARS, MAX_METADATA_ITEMS, check_metadata

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Span, TracerProvider

    from ..reader.messages import TopicMessage
    from ..writer.messages import WriteResult
    from ..writer.writer import Messages, OneMessage

    Accept = Callable[[Messages, bool, bool], Awaitable[list[asyncio.Future[WriteResult]] | None]]

INSTALL_HINT = "pip install 'ydb-topic-async[otel]'"
MESSAGING_SYSTEM = "ydb"
_TRACER_NAME = "ydb_topic_async"
_WRITE_STATUS = {"Skipped": "skipped", "WrittenInTx": "written_in_tx"}
"""The span attribute for acknowledgements other than a plain ``Written``."""
CONTEXT_SKIPPED_EVENT = "ydb.trace_context_skipped"
"""The producer span's event when the message had no room left in its metadata for the context."""


class OpenTelemetryTracing:
    """Traces writes and reads with OpenTelemetry; pass it as ``Driver(..., tracing=...)``.

    ``tracer_provider`` defaults to the global one; ``propagator`` (what writes the context into
    message metadata and reads it back) defaults to W3C Trace Context (``traceparent`` and
    ``tracestate``). Raises ``MissingDependencyError`` when ``opentelemetry-api`` is not installed.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, propagator: TextMapPropagator | None = None
    ) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as exc:
            raise MissingDependencyError(f"tracing needs the OpenTelemetry API: {INSTALL_HINT}") from exc
        from .._version import __version__

        self._trace = trace
        self._tracer = trace.get_tracer(_TRACER_NAME, __version__, tracer_provider=tracer_provider)
        self._propagator: TextMapPropagator = propagator or TraceContextTextMapPropagator()
        self._fields = frozenset(self._propagator.fields)

    # --- writing -------------------------------------------------------------------------------

    async def traced_accept(
        self, accept: Accept, topic: str, producer_id: str, messages: Messages, with_futures: bool
    ) -> list[asyncio.Future[WriteResult]] | None:
        """Start a producer span per message, carry its context in the message, end it on the ack.

        ``accept`` is the writer's own (untraced) accept; it gets the messages with the context
        added to their metadata and always returns acknowledgement futures.
        """
        single = isinstance(messages, (bytes, str, Message))
        if not single and not isinstance(messages, (list, tuple)):
            return await accept(messages, with_futures, True)  # it raises the usual error
        items: Iterable[OneMessage] = (messages,) if single else messages  # type: ignore[assignment]
        spans: list[Span] = []
        carried: list[OneMessage] = []
        try:
            for item in items:
                span = self._start_producer_span(topic, producer_id, item)
                spans.append(span)
                carried.append(self._inject(item, span))
            futures = await accept(carried[0] if single and carried else carried, True, True)
        except BaseException as exc:
            for span in spans:
                _fail_span(self._trace, span, exc)
            raise
        assert futures is not None
        for future, span in zip(futures, spans, strict=True):
            future.add_done_callback(functools.partial(self._on_ack, span))
        return futures if with_futures else None

    def _start_producer_span(self, topic: str, producer_id: str, message: OneMessage) -> Span:
        data = message.data if isinstance(message, Message) else message
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "write",
            "messaging.destination.name": topic,
            "messaging.ydb.producer_id": producer_id,
        }
        if isinstance(data, (bytes, bytearray, memoryview)):
            attributes["messaging.message.body.size"] = len(data)
        return self._tracer.start_span(f"write {topic}", kind=self._trace.SpanKind.PRODUCER, attributes=attributes)

    def _inject(self, message: Any, span: Span) -> Any:
        if isinstance(message, (bytes, str)):
            data: bytes | str = message
            pairs: list[tuple[str, Any]] = []
            chars = 0
        elif isinstance(message, Message):
            data = message.data
            # The metadata may be a one-shot iterable: read it once and send the list from here on.
            pairs = _metadata_pairs(message.metadata)
            # Checked as the writer checks it (same errors), so that the context added below is
            # not what turns bad or borderline metadata into a failure.
            chars = check_metadata(pairs)[2] if pairs else 0
        else:
            return message  # not a message at all: the writer rejects it as usual
        carrier: dict[str, str] = {}
        present = {key for key, _ in pairs}
        if not present & self._fields:  # else the caller propagates a context of its own: keep it
            self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        if carrier:
            extra_chars = sum(len(key) + len(value) for key, value in carrier.items())
            if chars + extra_chars > MAX_METADATA_CHARS or len(pairs) + len(carrier) > MAX_METADATA_ITEMS:
                # The message is valid as it is: it goes without the context rather than failing.
                span.add_event(
                    CONTEXT_SKIPPED_EVENT,
                    {"reason": f"the message metadata leaves no room for the trace context ({chars} characters"
                     f" and {len(pairs)} items used of {MAX_METADATA_CHARS} and {MAX_METADATA_ITEMS})"},
                )
                carrier.clear()
        if isinstance(message, (bytes, str)):
            return Message(data, metadata=carrier) if carrier else message
        pairs.extend(carrier.items())
        return Message(data, seq_no=message.seq_no, created_at=message.created_at, metadata=pairs)

    def _on_ack(self, span: Span, future: asyncio.Future[WriteResult]) -> None:
        if future.cancelled():
            _fail_span(self._trace, span, asyncio.CancelledError())
            return
        error = future.exception()
        if error is not None:
            _fail_span(self._trace, span, error)
            return
        result = future.result()
        span.set_attribute("messaging.destination.partition.id", str(result.partition_id))
        span.set_attribute("messaging.message.id", str(result.seq_no))
        span.set_attribute("messaging.ydb.seq_no", result.seq_no)
        offset = getattr(result, "offset", None)
        if offset is not None:
            span.set_attribute("messaging.ydb.offset", offset)
        status = _WRITE_STATUS.get(type(result).__name__)
        if status is not None:
            span.set_attribute("messaging.ydb.write_status", status)
        span.end()

    # --- reading -------------------------------------------------------------------------------

    def extract_context(self, message: TopicMessage) -> Context:
        """The trace context a message carries (an empty context when it carries none).

        Use it to parent or link the spans of your own processing of the message.
        """
        carrier = {key: value.decode("latin-1") for key, value in message.metadata_items.items() if key in self._fields}
        return self._propagator.extract(carrier)

    def on_receive(self, consumer: str | None, messages: Sequence[TopicMessage]) -> None:
        """Record a consumer span for messages handed out together (one partition session)."""
        if not messages:
            return
        links = []
        for message in messages:
            context = self._trace.get_current_span(self.extract_context(message)).get_span_context()
            if context.is_valid:
                links.append(self._trace.Link(context))
        first = messages[0]
        topic = first.topic_path
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "receive",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(first.partition_id),
            "messaging.consumer.group.name": consumer or "",
        }
        if len(messages) == 1:
            attributes["messaging.message.id"] = str(first.seq_no)
            attributes["messaging.ydb.offset"] = first.offset
            attributes["messaging.ydb.producer_id"] = first.producer_id
            attributes["messaging.message.body.size"] = len(first.data)
        else:
            attributes["messaging.batch.message_count"] = len(messages)
        span = self._tracer.start_span(
            f"receive {topic}", kind=self._trace.SpanKind.CONSUMER, links=links, attributes=attributes
        )
        span.end()


def _metadata_pairs(metadata: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    if not metadata:
        return []
    if isinstance(metadata, Mapping):
        return list(metadata.items())
    try:
        return list(metadata)
    except TypeError:
        check_metadata(metadata)  # raises the writer's error for what is not an iterable
        raise


def _fail_span(trace: Any, span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or type(error).__name__))
    span.end()


def resolve_tracing(tracing: bool | OpenTelemetryTracing | None) -> OpenTelemetryTracing | None:
    """The tracing a driver uses for ``Driver(tracing=...)``: off, the default OpenTelemetry, or the given one."""
    if tracing is None or tracing is False:
        return None
    if tracing is True:
        return OpenTelemetryTracing()
    if isinstance(tracing, OpenTelemetryTracing):
        return tracing
    raise InvalidArgumentError(f"tracing must be a bool or an OpenTelemetryTracing, not {type(tracing).__name__}")


__all__ = ["INSTALL_HINT", "OpenTelemetryTracing"]
